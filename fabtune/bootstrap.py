"""Rack bootstrap: preflight, the baseline profile, acceptance benchmarks, the transport check.

Phases (a failed phase stops the run; preflight changes nothing on any host):

1. **preflight**: every host answers (Ansible ping); every tool fabtune runs there is installed
   (perftest, nccl-tests, infiniband-diags, the launcher...: ``fabtune.hostpackages``, which names
   the package of a missing one for the host's distribution);
   ports Active/LinkUp at one rate; one firmware version per HCA model across the rack; every
   GPU beside its NIC (PIX/PXB); one RoCEv2 GID index on every host (RoCE); a master subnet
   manager (InfiniBand).
2. **apply**: the baseline profile through ``playbooks/apply.yml``.
3. **acceptance**: the static checks again (MTU now set); ib_write_bw over the all-pairs matrix
   (every rail), each pair against ``pair_threshold`` x its physical ceiling; a pair below it is
   *suspect* and each of its hosts is re-tested against a known-good partner (a host with a
   passing pair on that rail) before a host is blamed (a pair whose ends both pass that way runs
   once more: a pass then is one slow run, a warning; a second failure, the path between them);
   all_reduce_perf bus bandwidth per GPU against ``busbw_threshold`` x the reference below; the
   NCCL transport (NET/IB, no socket fallback) from the same run's NCCL_DEBUG=INFO log.
4. **job gate** (with a job spec, ``--model``): the job's predicted MFU at the target size from the
   acceptance busbw (``fabtune.advise.gate``); below ``--min-mfu`` the bootstrap fails there.

Bus bandwidth reference (GB/s)::

    busbw_ref = R x C_min / 8

``R`` is the number of RDMA NICs per host (fewest over hosts), ``C_min`` the lowest physical
goodput ceiling over every rail in Gb/s (``fabtune.perf.pairs.rail_ceiling``: link rate less
header overhead at the port's MTU). A multi-node ring all_reduce moves, per GPU, the bus
bandwidth a node's rails carry, so it can approach but never exceed ``R x C / 8``; NCCL's own
protocol overhead and the message-size ramp keep a healthy rack at about 0.9 of it at 8 GiB, so
the default threshold 0.8 flags a rack that has lost a rail, GPUDirect or path diversity.
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fabtune import ansible
from fabtune.advise.gate import GateResult, Goal, gate
from fabtune.advise.measured import from_steps
from fabtune.changes import knob_changes
from fabtune.errors import ExitStatus, FabtuneError
from fabtune.events import Event, quiet
from fabtune.hostpackages import check_tools
from fabtune.inventory import InventoryInfo, read_inventory
from fabtune.journal import Journal
from fabtune.lifecycle import RunContext, journaled_run
from fabtune.perf import checks, diagnose, nccl, pairs
from fabtune.perf.argv import NcclOptions, PerftestOptions
from fabtune.perf.checkrun import static_checks
from fabtune.perf.checks import CheckResult
from fabtune.perf.deadline import timed_out
from fabtune.perf.fabric import HostView, read_hosts
from fabtune.perf.parsers.ibstat import IbStat
from fabtune.perf.schedule import Pair, pair_rounds
from fabtune.profile import Profile, check_against_rack


class BootstrapFailed(FabtuneError):
    """A check or acceptance benchmark failed: exit 7 (CHECK_FAILED)."""

    code = ExitStatus.CHECK_FAILED


VALIDATE_MODULE = "fabric_validate"
PAIR_SIZE = 1 << 20
BUSBW_SIZE = "8G"


# --------------------------------------------------------------------------- pure checks


def firmware_check(stats: Mapping[str, IbStat]) -> list[CheckResult]:
    """One firmware version per HCA model across the rack (the most common one is the rack's)."""
    per_model: dict[str, Counter[str]] = {}
    seen: list[tuple[str, str, str, str]] = []
    for host, stat in sorted(stats.items()):
        for ca in stat.cas:
            model = ca.ca_type or "unknown"
            fw = ca.firmware_version or "unknown"
            per_model.setdefault(model, Counter())[fw] += 1
            seen.append((host, ca.name, model, fw))
    results = []
    for host, dev, model, fw in seen:
        usual = per_model[model].most_common(1)[0][0]
        if fw != usual:
            results.append(
                CheckResult(
                    "firmware",
                    host,
                    "fail",
                    f"{dev} ({model}) firmware {fw}, the rack runs {usual}",
                    f"Firmware version: {fw}",
                )
            )
    if not results:
        versions = ", ".join(f"{m} {c.most_common(1)[0][0]}" for m, c in sorted(per_model.items()))
        results.append(
            CheckResult("firmware", "*", "pass", f"one firmware per HCA model: {versions or 'none'}")
        )
    return results


def _row(raw: str, first: str) -> str:
    for line in raw.splitlines():
        parts = line.split()
        if parts and parts[0] == first and not line[:1].isspace():  # the header row is indented
            return " ".join(parts)
    return ""


def with_evidence(results: Sequence[CheckResult], views: Mapping[str, HostView]) -> list[CheckResult]:
    """Failures with the raw tool line that shows them (the topo matrix row, the show_gids row)."""
    out = []
    for r in results:
        view = views.get(r.host)
        if r.verdict != "pass" and view is not None and r.check == "affinity":
            gpu = re.match(r"(GPU\d+)", r.summary)
            line = _row(view.raw.get("topo", ""), gpu.group(1)) if gpu else ""
            out.append(
                CheckResult(
                    r.check,
                    r.host,
                    r.verdict,
                    r.summary,
                    f"nvidia-smi topo -m: {line}" if line else r.evidence,
                )
            )
        elif r.verdict != "pass" and view is not None and r.check == "gid_index":
            dev = r.summary.split(":", 1)[0]
            lines = [
                " ".join(line.split())
                for line in view.raw.get("gids", "").splitlines()
                if line.split()[:1] == [dev]
                and "v2" in line.split()
                and re.search(r"\d+\.\d+\.\d+\.\d+", line)
            ]
            out.append(
                CheckResult(
                    r.check, r.host, r.verdict, r.summary, f"show_gids: {lines[0]}" if lines else r.evidence
                )
            )
        else:
            out.append(r)
    return out


def busbw_reference(rails: int, ceiling_gbps: float) -> float:
    """``R x C_min / 8``: the bus bandwidth per GPU a ring can reach over the rails, GB/s."""
    return rails * ceiling_gbps / 8.0


def busbw_check(
    measured: float | None, reference: float, threshold: float, evidence: str = ""
) -> CheckResult:
    """all_reduce busbw per GPU must reach ``threshold`` x ``reference``."""
    if measured is None:
        return CheckResult("busbw", "*", "fail", "all_reduce_perf gave no bus bandwidth", evidence)
    share = measured / reference if reference > 0 else 0.0
    verdict: checks.Verdict = "pass" if share >= threshold else "fail"
    return CheckResult(
        "busbw",
        "*",
        verdict,
        f"all_reduce busbw {measured:.1f} GB/s per GPU = {share:.0%} of {reference:.1f} GB/s "
        f"(threshold {threshold:.0%})",
        evidence,
    )


@dataclass(frozen=True)
class PairVerdict:
    """One ib_write_bw pair against its threshold."""

    server: str
    client: str
    rail: int
    device: str
    gbps: float | None
    ceiling_gbps: float
    share: float | None
    verdict: str
    error: str | None = None
    note: str = ""
    counters: Mapping[str, Mapping[str, int]] = field(default_factory=dict)


def judge_pair(result: pairs.PairResult, threshold: float, note: str = "") -> PairVerdict:
    share = result.share_of_ceiling
    ok = result.error is None and share is not None and share >= threshold
    return PairVerdict(
        result.server,
        result.client,
        result.rail,
        result.device,
        result.gbps,
        result.ceiling_gbps,
        share,
        "pass" if ok else "fail",
        result.error,
        note,
        result.counters,
    )


def good_hosts(verdicts: Sequence[PairVerdict], rail: int) -> set[str]:
    """Hosts with at least one passing pair on ``rail`` (both ends of a passing pair are healthy)."""
    return {h for v in verdicts if v.rail == rail and v.verdict == "pass" for h in (v.server, v.client)}


@dataclass(frozen=True)
class Retest:
    """A host of a suspect pair, to be re-tested against a known-good partner."""

    host: str
    rail: int
    partner: str | None


def plan_retests(verdicts: Sequence[PairVerdict]) -> list[Retest]:
    """For each (host, rail) of a suspect pair, a known-good partner (None when none exists).

    A partner is a host with a passing pair on that rail; one that did not fail with this host
    is preferred.
    """
    out = []
    suspects = [v for v in verdicts if v.verdict == "fail"]
    for host, rail in sorted({(h, v.rail) for v in suspects for h in (v.server, v.client)}):
        failed_with = {
            o
            for v in suspects
            if v.rail == rail and host in (v.server, v.client)
            for o in (v.server, v.client)
        } - {host}
        good = sorted(good_hosts(verdicts, rail) - {host})
        preferred = [g for g in good if g not in failed_with] or good
        out.append(Retest(host, rail, preferred[0] if preferred else None))
    return out


def retest_rounds(retests: Sequence[Retest], base_port: int = 18515) -> list[list[tuple[Retest, Pair]]]:
    """Pack the re-tests into concurrent rounds where no host is in two runs (partner = server)."""
    rounds: list[list[tuple[Retest, Pair]]] = []
    busy: list[set[str]] = []
    for t in retests:
        if t.partner is None:
            continue
        free = [i for i, used in enumerate(busy) if t.host not in used and t.partner not in used]
        if not free:
            rounds.append([])
            busy.append(set())
        index = free[0] if free else len(rounds) - 1
        pair = Pair(server=t.partner, client=t.host, rail=t.rail, port=base_port + len(rounds[index]))
        rounds[index].append((t, pair))
        busy[index] |= {t.host, t.partner}
    return rounds


def blame(
    verdicts: Sequence[PairVerdict], retests: Sequence[tuple[Retest, PairVerdict | None]], threshold: float,
    reruns: Mapping[tuple[str, str, int], PairVerdict] | None = None,
) -> list[CheckResult]:
    """Host verdicts from the re-tests: a host that also fails with a known-good partner is at fault.

    A pair whose two ends both pass with known-good partners fails only together: its path, unless
    its own re-run (``reruns``, by client, server and rail) passes, when the first run was a slow
    run (real ib_write_bw has them now and then) and the pair gets a warning, not a failure.
    """
    results: list[CheckResult] = []
    cleared: set[tuple[str, int]] = set()
    for test, verdict in retests:
        if verdict is None:
            results.append(
                CheckResult(
                    "pair_bandwidth",
                    test.host,
                    "fail",
                    f"rail {test.rail}: below {threshold:.0%} of ceiling, no known-good partner to isolate",
                    _suspect_evidence(verdicts, test.host, test.rail),
                )
            )
        elif verdict.verdict == "fail":
            results.append(
                CheckResult(
                    "pair_bandwidth",
                    test.host,
                    "fail",
                    f"{verdict.device}: also below {threshold:.0%} with known-good {test.partner} "
                    f"({_got(verdict)})",
                    _suspect_evidence(verdicts, test.host, test.rail),
                )
            )
        else:
            cleared.add((test.host, test.rail))
    results += [_together(v, (reruns or {}).get((v.client, v.server, v.rail)), verdicts)
                for v in only_together(verdicts, cleared)]
    return results


def only_together(verdicts: Sequence[PairVerdict], cleared: set[tuple[str, int]]) -> list[PairVerdict]:
    """The failed pairs both of whose ends passed with known-good partners."""
    return [v for v in verdicts
            if v.verdict == "fail" and (v.server, v.rail) in cleared and (v.client, v.rail) in cleared]


def _got(verdict: PairVerdict) -> str:
    if verdict.gbps is None:
        return "error " + (verdict.error or "?")
    return f"{verdict.gbps:.1f} Gb/s = {verdict.share or 0:.0%} of {verdict.ceiling_gbps:.1f}"


def _together(v: PairVerdict, rerun: PairVerdict | None, verdicts: Sequence[PairVerdict]) -> CheckResult:
    """A pair that failed while both its ends pass with others: its path, or a slow run its re-run
    did not repeat."""
    evidence = _suspect_evidence(verdicts, v.client, v.rail)
    if rerun is not None and rerun.verdict == "pass":
        return CheckResult(
            "pair_bandwidth", f"{v.client}<->{v.server}", "warn",
            f"{v.device}: one slow run, not repeated: {_got(rerun)} on a re-run, and both ends pass "
            "with known-good partners", evidence,
        )
    again = f" (its re-run too: {_got(rerun)})" if rerun is not None else ""
    return CheckResult(
        "pair_bandwidth", f"{v.client}<->{v.server}", "fail",
        f"{v.device}: the pair fails only together (both ends pass with known-good partners){again}: "
        "the path between them", evidence,
    )


RERUN_NOTE = "re-run of a pair whose ends pass with known-good partners"


def rerun_rounds(failed: Sequence[PairVerdict], base_port: int = 18515) -> list[list[Pair]]:
    """The failed pairs to run again, packed into rounds where no host is in two runs."""
    rounds: list[list[Pair]] = []
    busy: list[set[str]] = []
    for v in failed:
        index = next((i for i, used in enumerate(busy) if not {v.client, v.server} & used), len(rounds))
        if index == len(rounds):
            rounds.append([])
            busy.append(set())
        port = base_port + len(rounds[index])
        rounds[index].append(Pair(server=v.server, client=v.client, rail=v.rail, port=port))
        busy[index] |= {v.client, v.server}
    return rounds


def _suspect_evidence(verdicts: Sequence[PairVerdict], host: str, rail: int) -> str:
    parts = []
    for v in verdicts:
        if v.rail == rail and v.verdict == "fail" and host in (v.server, v.client):
            got = v.error or f"{v.gbps:.1f} Gb/s ({v.share or 0:.0%})"
            parts.append(f"{v.client}->{v.server} {v.device}: {got}")
    return "; ".join(parts)


# --------------------------------------------------------------------------- the report


@dataclass
class BootstrapReport:
    """Everything a bootstrap found: host checks, pair verdicts, re-tests, the phase it reached."""

    fabric: str
    profile: str
    pair_threshold: float
    busbw_threshold: float
    phase: str = "preflight"
    checks: list[CheckResult] = field(default_factory=list)
    pairs: list[PairVerdict] = field(default_factory=list)
    retests: list[PairVerdict] = field(default_factory=list)
    busbw_gbytes: float | None = None
    busbw_reference_gbytes: float | None = None
    busbw_line_rate_gbytes: float | None = None  # R x the slowest rail's rate / 8
    changes: dict[str, int] = field(default_factory=dict)
    applied: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    gate: GateResult | None = None  # --model: the job's predicted MFU at the target size

    @property
    def passed(self) -> bool:
        return (
            self.phase == "done"
            and not any(c.verdict == "fail" for c in self.checks)
            and not any(p.verdict == "fail" and not self.rerun_passed(p) for p in self.pairs)
        )

    def rerun_passed(self, pair: PairVerdict) -> bool:
        """Whether ``pair`` passed when it was run again (its first run a slow run)."""
        return any(r.note == RERUN_NOTE and r.verdict == "pass" and (r.client, r.server, r.rail)
                   == (pair.client, pair.server, pair.rail) for r in self.retests)

    @property
    def failed_hosts(self) -> list[str]:
        return sorted({c.host for c in self.checks if c.verdict == "fail" and c.host != "*"})

    def failures(self) -> list[CheckResult]:
        return [c for c in self.checks if c.verdict == "fail"]


@contextlib.contextmanager
def _step(
    journal: Journal | None, run_id: str | None, name: str, payload: Mapping[str, Any]
) -> Iterator[dict[str, Any]]:
    """Journal a phase: intent before, outcome (``done``/``failed``) after."""
    outcome: dict[str, Any] = {"state": "done"}
    seq = journal.step(run_id, "phase", name, payload) if journal and run_id else None
    try:
        yield outcome
    except BaseException:
        if journal and run_id and seq is not None:
            journal.finish_step(run_id, seq, "failed")
        raise
    if journal and run_id and seq is not None:
        found = outcome.get("payload")
        journal.finish_step(run_id, seq, outcome["state"], None if found is None else {**payload, **found})


def preflight(
    inventory: Path, info: InventoryInfo, report: BootstrapReport, emit: Event
) -> dict[str, HostView] | None:
    """Reachability, tools, links, firmware, affinity, GID index, subnet manager. Changes nothing.

    Returns:
        The host views when every host answered (checks may still have failed), else None.
    """
    emit("phase", "preflight: reachability", {})
    ping = ansible.run_module("ansible.builtin.ping", "", inventory)
    for host in info.hosts:
        if host in ping.unreachable_hosts or host in ping.failed_hosts:
            report.checks.append(
                CheckResult("reachable", host, "fail", "does not answer over SSH", _first_failure(ping, host))
            )
    if any(c.check == "reachable" for c in report.checks):
        return None
    report.checks.append(CheckResult("reachable", "*", "pass", f"{len(info.hosts)} hosts answer"))
    emit("phase", "preflight: tools", {})
    report.checks += check_tools(inventory, info)  # a missing tool named with its package
    emit("phase", "preflight: links, firmware, affinity, GIDs, subnet manager", {})
    views = read_hosts(inventory)
    static = [r for r in static_checks(views) if r.check != "mtu"]  # the profile sets the MTU
    report.checks += with_evidence(static, views)
    report.checks += firmware_check({h: v.ports for h, v in views.items() if v.ports is not None})
    return views


def _first_failure(outcome: ansible.RunOutcome, host: str) -> str:
    for t in outcome.failures():
        if t.host == host:
            return str(t.result.get("msg", ""))[:200]
    return ""


def apply_profile(inventory: Path, profile: Profile, report: BootstrapReport, emit: Event) -> bool:
    """Apply the baseline profile; per-host failures become check results."""
    emit("phase", "applying the baseline profile", {})
    outcome = ansible.run_playbook(
        "apply.yml", inventory, extravars={"fabric_desired": profile.desired.tree()}, diff=True
    )
    changed = knob_changes(outcome.tasks)
    report.changes = {h: len(c) for h, c in changed.items()}
    report.applied = {h: [dataclasses.asdict(k) for k in c] for h, c in changed.items()}
    for task in outcome.failures():
        problems = task.result.get("problems") if task.module == VALIDATE_MODULE else None
        why = "; ".join(map(str, problems)) if problems else str(task.result.get("msg", "failed"))[:300]
        report.checks.append(CheckResult("apply", task.host, "fail", f"{task.task}: {why}"))
    for host in outcome.unreachable_hosts:
        if not any(c.host == host and c.check == "apply" for c in report.checks):
            report.checks.append(CheckResult("apply", host, "fail", "unreachable during apply"))
    if outcome.ok:
        report.checks.append(
            CheckResult(
                "apply", "*", "pass", f"profile applied ({sum(report.changes.values())} knobs changed)"
            )
        )
    return outcome.ok


def _retest(
    inventory: Path, info: InventoryInfo, report: BootstrapReport, views: Mapping[str, HostView],
    emit: Event, *, opts: PerftestOptions,
) -> None:
    """Re-test each suspect pair's hosts against known-good partners, run again each pair whose two
    ends pass that way, then blame (or clear) them."""
    tests = plan_retests(report.pairs)
    measured: dict[tuple[str, int], PairVerdict] = {}
    for index, rnd in enumerate(retest_rounds(tests), start=1):
        emit("phase", f"re-testing suspect hosts against known-good partners ({index})", {})
        todo = [p for _t, p in rnd]
        results = pairs.run_round(inventory, todo, views, opts, deadline_s=info.bench_timeout_s)
        for (test, _pair), res in zip(rnd, results, strict=True):
            why = f"re-test of {test.host} with known-good {test.partner}"
            verdict = judge_pair(res, report.pair_threshold, why)
            measured[(test.host, test.rail)] = verdict
            report.retests.append(verdict)
    found = [(t, measured.get((t.host, t.rail))) for t in tests]
    cleared = {(t.host, t.rail) for t, v in found if v is not None and v.verdict == "pass"}
    reruns: dict[tuple[str, str, int], PairVerdict] = {}
    for index, todo in enumerate(rerun_rounds(only_together(report.pairs, cleared)), start=1):
        emit("phase", f"running again the pairs that failed only together ({index})", {})
        for res in pairs.run_round(inventory, todo, views, opts, deadline_s=info.bench_timeout_s):
            verdict = judge_pair(res, report.pair_threshold, RERUN_NOTE)
            reruns[(res.client, res.server, res.rail)] = verdict
            report.retests.append(verdict)
    report.checks += blame(report.pairs, found, report.pair_threshold, reruns)


def _pair_acceptance(
    inventory: Path, info: InventoryInfo, report: BootstrapReport, views: Mapping[str, HostView],
    emit: Event,
) -> None:
    """ib_write_bw over every pair, rail by rail; suspects re-tested before one is blamed."""
    hosts = sorted(views)
    rails = min(len(v.rails) for v in views.values())
    opts = PerftestOptions(size=PAIR_SIZE, duration_s=2)
    done = pairs.run_rounds(
        inventory, pair_rounds(hosts, rails), views, opts, emit,
        deadline_s=info.bench_timeout_s,
    )
    report.pairs = [judge_pair(r, report.pair_threshold) for rnd in done for r in rnd]
    _retest(inventory, info, report, views, emit, opts=opts)
    if not any(p.verdict == "fail" for p in report.pairs):
        low = min((p.share or 0.0 for p in report.pairs), default=0.0)
        summary = (
            f"{len(report.pairs)} pair runs, lowest {low:.0%} of the ceiling "
            f"(threshold {report.pair_threshold:.0%})"
        )
        report.checks.append(CheckResult("pair_bandwidth", "*", "pass", summary))


def _busbw_acceptance(
    inventory: Path, info: InventoryInfo, report: BootstrapReport, views: Mapping[str, HostView]
) -> None:
    """all_reduce_perf bus bandwidth against NICs x ceiling / 8, and each host's NCCL transport."""
    hosts = sorted(views)
    rails = min(len(v.rails) for v in views.values())
    first = views[hosts[0]]
    gpus = len([c for c in first.topo.columns if c.startswith("GPU")]) if first.topo else 1
    launcher: nccl.Launcher = "srun" if info.launcher == "srun" else "mpirun"
    options = NcclOptions(min_bytes=BUSBW_SIZE, max_bytes=BUSBW_SIZE, gpus_per_process=gpus, iters=5,
                          warmup_iters=1)
    run = nccl.run(inventory, hosts, options, {}, launcher=launcher, oob_interface=info.oob_interface,
                   deadline_s=info.bench_timeout_s)
    ceiling, reference = _yardsticks(report, views, rails)
    rows = run.result.rows if run.result is not None else ()
    report.busbw_gbytes = rows[-1].out_of_place.busbw_gbps if rows else None
    tail = run.output.strip().splitlines()[-1] if run.output.strip() else ""
    evidence = f"{BUSBW_SIZE}B over {len(hosts)} hosts x {gpus} GPUs, {rails} rails of {ceiling:.1f} Gb/s"
    report.checks.append(
        busbw_check(report.busbw_gbytes, reference, report.busbw_threshold,
                    evidence if rows else f"rc {run.rc}: {run.error or tail}")
    )
    why = str(run.error) if timed_out(run.rc) else diagnose.failure_line(run.rc, run.output)
    report.checks += diagnose.transport_results(
        hosts, run.output, failed=not rows, why=why, gids=diagnose.gid_tables(views)
    )


def _yardsticks(report: BootstrapReport, views: Mapping[str, HostView], rails: int) -> tuple[float, float]:
    """The busbw reference ``R x C_min / 8`` and the line rate ``R x rate_min / 8`` of the rack
    (set on ``report``); returns ``C_min`` (the lowest goodput ceiling over every rail, Gb/s) and
    the reference (GB/s)."""
    every = [r for v in views.values() for r in v.rails]
    ceiling = min(pairs.rail_ceiling(r) for r in every)
    report.busbw_reference_gbytes = reference = busbw_reference(rails, ceiling)
    report.busbw_line_rate_gbytes = rails * min(r.rate_gbps for r in every) / 8.0
    return ceiling, reference


def acceptance(inventory: Path, info: InventoryInfo, report: BootstrapReport, emit: Event) -> None:
    """Static checks again, the pair matrix with re-tests, all_reduce busbw and the transport."""
    views = read_hosts(inventory)
    report.checks += with_evidence(static_checks(views), views)
    if len(views) >= 2:
        _pair_acceptance(inventory, info, report, views, emit)
    emit("phase", "all_reduce_perf bus bandwidth and NCCL transport", {})
    _busbw_acceptance(inventory, info, report, views)


def bootstrap(
    inventory: Path,
    profile: Profile,
    *,
    pair_threshold: float = 0.9,
    busbw_threshold: float = 0.8,
    on_event: Event | None = None,
    goal: Goal | None = None,
) -> tuple[BootstrapReport, RunContext]:
    """``fabtune bootstrap``: the profile (and ``goal``, the job) checked against the rack, then
    :func:`run_bootstrap` and, once the rack is accepted, :func:`job_gate` as one journaled run under
    the fabric's lock, closed ``passed`` or ``failed``, its report written.

    Returns:
        The report, and the closed run (its id, the report files written).
    """
    info = read_inventory(inventory)
    check_against_rack(profile, info)
    if goal is not None:
        goal.check(len(info.hosts))
    with journaled_run("bootstrap", info.name, inventory, profile=str(profile.path)) as run:
        report = run_bootstrap(
            inventory,
            info,
            profile,
            pair_threshold=pair_threshold,
            busbw_threshold=busbw_threshold,
            journal=run.journal,
            run_id=run.run_id,
            on_event=on_event,
        )
        if goal is not None and report.passed:
            job_gate(run, info, report, goal)
        run.end(
            "passed" if report.passed else "failed",
            {"phase": report.phase, "failed_hosts": report.failed_hosts, "busbw_gbytes": report.busbw_gbytes},
        )
    return report, run


def job_gate(run: RunContext, info: InventoryInfo, report: BootstrapReport, goal: Goal) -> None:
    """The job's predicted MFU at the target size from this run's acceptance busbw, journaled as the
    phase ``job gate`` (inputs: the job, the target, the threshold; result: the prediction); below
    ``--min-mfu`` the bootstrap stops there (``report.phase``) and fails with the reason."""
    inputs = goal.inputs(len(info.hosts))
    report.phase = "job gate"
    with _step(run.journal, run.run_id, "job gate", inputs) as step:
        measured = from_steps(run.run_id, "bootstrap", info.fabric, run.journal.steps(run.run_id))
        found = gate(goal.job, measured, inputs["nodes"], goal.min_mfu)
        first = len(report.checks)
        report.gate = found
        report.checks.append(CheckResult("job_mfu", "*", "pass" if found.passed else "fail", found.line()))
        step["state"] = "done" if found.passed else "failed"
        step["payload"] = {"predictions": {"acceptance": found.record()}, "checks": _checks(report, first)}
    if found.passed:
        report.phase = "done"


def run_bootstrap(
    inventory: Path,
    info: InventoryInfo,
    profile: Profile,
    *,
    pair_threshold: float = 0.9,
    busbw_threshold: float = 0.8,
    journal: Journal | None = None,
    run_id: str | None = None,
    on_event: Event | None = None,
) -> BootstrapReport:
    """Preflight, apply the baseline profile, acceptance; stops at the first failed phase."""
    emit = on_event or quiet
    report = BootstrapReport(info.name, str(profile.path), pair_threshold, busbw_threshold)
    with _step(journal, run_id, "preflight", {"hosts": list(info.hosts)}) as step:
        views = preflight(inventory, info, report, emit)
        failed = views is None or bool(report.failures())
        step["state"] = "failed" if failed else "done"
        step["payload"] = {"failures": [c.__dict__ for c in report.failures()], "checks": _checks(report, 0)}
    if failed:
        return report
    report.phase = "apply"
    with _step(journal, run_id, "apply", {"profile": str(profile.path)}) as step:
        first = len(report.checks)
        ok = apply_profile(inventory, profile, report, emit)
        step["state"] = "done" if ok else "failed"
        step["payload"] = {
            "changes": report.changes,
            "applied": report.applied,
            "checks": _checks(report, first),
        }
    if not ok:
        return report
    report.phase = "acceptance"
    with _step(
        journal, run_id, "acceptance", {"pair_threshold": pair_threshold, "busbw_threshold": busbw_threshold}
    ) as step:
        first = len(report.checks)
        acceptance(inventory, info, report, emit)
        step["state"] = (
            "failed" if report.failures() or any(p.verdict == "fail" for p in report.pairs) else "done"
        )
        step["payload"] = {
            "failures": [c.__dict__ for c in report.failures()],
            "busbw_gbytes": report.busbw_gbytes,
            "busbw_reference_gbytes": report.busbw_reference_gbytes,
            "busbw_line_rate_gbytes": report.busbw_line_rate_gbytes,
            "checks": _checks(report, first),
            "pairs": [dataclasses.asdict(p) for p in report.pairs],
            "retests": [dataclasses.asdict(p) for p in report.retests],
        }
    report.phase = "done"
    return report


def _checks(report: BootstrapReport, first: int) -> list[dict[str, Any]]:
    """The check results a phase added (from index ``first``), for its journal step."""
    return [dataclasses.asdict(c) for c in report.checks[first:]]
