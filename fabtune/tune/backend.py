"""The tuning loop's I/O: facts, apply (commit-confirmed), confirm, measure, all through Ansible."""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import json
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fabtune import ansible, sshdirect
from fabtune.errors import BenchmarkError, ConfigError, FabtuneError, PlaybookFailed
from fabtune.inventory import InventoryInfo, hostvars_of
from fabtune.perf import diagnose, pairs, rdmacounters
from fabtune.perf.argv import PerftestOptions
from fabtune.perf.fabric import CHECKS_PLAYBOOK, HostView, read_hosts, views_of
from fabtune.perf.pairs import PairResult, more_lead
from fabtune.perf.schedule import covering_rounds, pair_rounds, rail_pairs
from fabtune.state import HostState, trees_of
from fabtune.tune import pairs as rdma_cm
from fabtune.tune.measure import PLAYBOOK as MEASURE_PLAYBOOK
from fabtune.tune.measure import (
    Batch,
    MeasureSpec,
    PlannedBatch,
    batch_of,
    busbw_ceilings,
    measure,
    plan_batch,
)

# The host-side revert program (role fabric_revert) and its verbs (fabric_apply.EXTEND_FLAG and
# CONFIRM_FLAG), with the role's tasks (extend.yml's, confirm.yml's) whose results they stand for.
REVERT_SCRIPT = "/usr/local/sbin/fabtune-revert"
EXTEND_FLAG = "--extend"
EXTEND_TASK = "Extend the revert deadline (the controller is alive)"
CONFIRM_FLAG = "--confirm"
CONFIRM_TASK = "Confirm the run (cancel the revert)"
EXIT_REVERTED = 3  # fabtune-revert's exit status where the host already reverted the run (fabric_apply)
# Where each host keeps a run's pre-run record (the fabric_revert module writes it on first arming).
REVERT_STATE_DIR = "/var/lib/fabtune/revert"
# An armed apply arms each host's revert for the deadline plus the time the apply itself may take
# (role variable fabric_revert_apply_s); its last play then sets the deadline from its end. The
# allowance is twice the longest apply this run has seen, and at least APPLY_ALLOWANCE_S: an apply
# that outlasted the deadline had its hosts revert in its middle, and its later roles then changed
# a host that was no longer armed (found with a host lost mid-apply: SSH to it hung for 30 s a task).
APPLY_ALLOWANCE_S = 60
# The tasks that install the host-side code (roles fabric_revert and fabric_boot): once one has run
# on a host in this run, later applies of the run skip it there (fabric_revert_installed_hosts,
# fabric_boot_installed_hosts): the code is the same for every move.
REVERT_INSTALL_TASK = "Install fabtune-revert and the code it shares with the fabric modules"
BOOT_INSTALL_TASK = "Install fabtune-boot and its unit, enabled (multi-user.target wants it)"
# The facts playbook; the variable that holds facts.yml's play, and apply.yml's plays on the
# hosts, to some hosts (their pattern; default all)
FACTS_PLAYBOOK = "facts.yml"
HOSTS_VAR = "fabric_hosts"


def extend_result(done: sshdirect.Result) -> ansible.TaskResult:
    """One host's ``fabtune-revert --extend`` as the extend task's result (its JSON line: ``armed``,
    ``deadline``, ``reverted``, ``msg``); a host that could not be reached is unreachable."""
    return revert_result(done, EXTEND_TASK)


def confirm_result(done: sshdirect.Result) -> ansible.TaskResult:
    """One host's ``fabtune-revert --confirm`` as the confirm task's result (``changed``, ``reverted``,
    ``msg``); a host that could not be reached is unreachable."""
    task = revert_result(done, CONFIRM_TASK)
    return dataclasses.replace(task, changed=done.ok and bool(task.result.get("changed")))


def combined(first: ansible.RunOutcome, second: ansible.RunOutcome) -> ansible.RunOutcome:
    """Two outcomes of the same work on different hosts as one (the second's artifacts)."""
    stats: dict[str, dict[str, int]] = {}
    for outcome in (first, second):
        for key, per_host in outcome.stats.items():
            stats.setdefault(key, {}).update(per_host)
    status = next((o.status for o in (second, first) if o.status != "successful"), "successful")
    return ansible.RunOutcome(status=status, rc=second.rc or first.rc, stats=stats,
                              tasks=first.tasks + second.tasks, artifact_dir=second.artifact_dir)


def revert_result(done: sshdirect.Result, task: str) -> ansible.TaskResult:
    """One host's ``fabtune-revert`` verb as the result of the role's ``task`` it does the work of."""
    result: dict[str, Any] = {}
    if done.rc is not None:
        try:
            line = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else "{}"
            result = dict(json.loads(line))
        except ValueError:
            result = {}
        if done.rc != 0:
            result.setdefault("msg", (done.stderr.strip() or done.stdout.strip() or f"rc {done.rc}")[-500:])
            result["rc"] = done.rc
    else:
        result = {"msg": done.error, "unreachable": True}
    event = ("runner_on_ok" if done.ok else "runner_on_unreachable" if done.rc is None
             else "runner_on_failed")
    return ansible.TaskResult(host=done.host, task=task, action="fabtune.fabric.fabric_revert",
                              event=event, changed=done.ok, result=result)


def installed_on(outcome: ansible.RunOutcome, task: str) -> set[str]:
    """The hosts where ``task`` (an install of host-side code) ran and succeeded, not in check mode."""
    return {t.host for t in outcome.tasks
            if t.task == task and t.event == "runner_on_ok" and not t.result.get("skipped")}


def prerun_record_path(run_id: str) -> str:
    """The host path of run ``run_id``'s pre-run record (the id's shape is checked by the caller)."""
    return f"{REVERT_STATE_DIR}/{run_id}.prerun.json"


@dataclass(frozen=True)
class _PlannedMeasure:
    """A batch ready to run, with the pair rounds planned after it: its spec, the batch, the rounds,
    the playbooks of the run (the batch's, then the rounds' in turn) and the run's timeout."""

    spec: MeasureSpec
    batch: PlannedBatch
    rounds: Sequence[pairs.PlannedRound]
    parts: list[ansible.Part]
    timeout_s: int


@dataclass
class AnsibleBackend:
    """Every host operation of a tuning run, as playbook runs through the one adapter."""

    info: InventoryInfo
    deadline_s: int = 300
    gpus: int = 0
    netdevs: Mapping[str, list[str]] | None = None
    ceilings: Mapping[str, float] | None = None
    # per host, the reads of its ports' RDMA hw_counters (fabtune.perf.rdmacounters)
    hw_reads: Mapping[str, list[dict[str, Any]]] = field(default_factory=dict)
    views: dict[str, HostView] = field(default_factory=dict)  # read once, for the pair rounds
    hosts: Sequence[str] | None = None  # only these hosts (a rollback of a run that changed some)
    _hostvars: dict[str, dict[str, Any]] | None = field(default=None, repr=False)
    longest_apply_s: float = 0.0  # the longest apply playbook run so far (the next allowance)
    # hosts where an apply of this run installed the revert code / the boot entry point
    revert_installed: set[str] = field(default_factory=set)
    boot_installed: set[str] = field(default_factory=set)
    # The counters as the last benchmark read them after it ran; None once anything may have moved
    # them other than the next benchmark itself: an apply (a move, a restore), a pair matrix, a
    # benchmark that failed. The next batch or round reads none before where these hold its ports:
    # nothing but the controller's own reads (facts, the revert's confirm and extend) ran between.
    counters: rdmacounters.Reads | None = field(default=None, repr=False)
    # The tuning loop pairs the hosts: the first facts read of every host reads their views too
    views_with_facts: bool = False
    # Pair rounds measured in the same Ansible run as the last batch (``measure``'s ``pairs_after``),
    # in order: each is what the next ``pairs`` call returns (or raises), while nothing changed.
    prefetched: list[rdma_cm.PairRound | Exception] = field(default_factory=list, repr=False)
    # The batch measured in the same Ansible run as the last apply (``apply``'s ``measure_after``)
    # or facts read (``facts``'s): its repetitions, the pair rounds measured after it, and the batch
    # (or why it failed) that the next ``measure`` call of both returns.
    prefetched_batch: tuple[int, int, Batch | Exception] | None = field(default=None, repr=False)
    # The facts read in the same Ansible run as the last apply (``apply``'s ``facts_after``): the
    # facts of every host (or why they could not be read) that the next ``facts`` call returns.
    prefetched_facts: dict[str, dict[str, Any]] | Exception | None = field(default=None, repr=False)
    # Added to every later round's common start lead once a round's clients started late
    # (``pairs.more_lead``): Ansible took longer to reach its hosts than the lead allowed.
    lead_extra_s: float = 0.0
    # The launch host and its Open MPI plm_rsh values as the last batch read them (Batch.rsh_site):
    # the next batch from that host takes them instead of running ompi_info again
    rsh_site: tuple[str, Mapping[str, str]] | None = field(default=None, repr=False)

    @property
    def inventory(self) -> Path:
        return self.info.path

    def _limit(self, hosts: Iterable[str] | None) -> str | None:
        """The host pattern of a run on ``hosts`` (None: every host of the inventory, no pattern).

        Raises:
            ConfigError: no host, or a host that is not the inventory's.
        """
        if hosts is None:
            hosts = self.hosts
        if hosts is None:
            return None
        chosen = sorted(set(hosts))
        unknown = [h for h in chosen if h not in self.info.hosts]
        if unknown or not chosen:
            what = f"{', '.join(unknown)} not in the inventory" if unknown else "no host given"
            raise ConfigError(str(self.info.path), [f"hosts: {what}"])
        return None if chosen == sorted(self.info.hosts) else ",".join(chosen)

    @property
    def limit(self) -> str | None:
        """The host pattern every run of this backend is held to (its ``hosts``; None: all)."""
        return self._limit(None)

    def facts(
        self, *, hosts: Sequence[str] | None = None, measure_after: int = 0, pairs_after: int = 0
    ) -> dict[str, dict[str, Any]]:
        """Each host's fabric facts (desired-state shape plus hardware); ``hosts``: only theirs
        (None: every host of this backend).

        With ``views_with_facts`` (the tuning loop's), the first read of every host of a rack to
        pair also reads the hosts' views (rails, devices, addresses: what the pair rounds need, and
        no move changes) in the same Ansible run; where they cannot be read, the first pair round
        reads them again and says why.

        ``measure_after``, ``pairs_after``: the caller's next call is ``measure`` of those: the
        batch and its rounds run in the same Ansible run, right after the read, and that call
        returns them. Facts read with the last apply (its ``facts_after``) are returned as read."""
        limit = self._limit(hosts)
        taken, self.prefetched_facts = self.prefetched_facts, None
        if taken is not None and limit is None:
            if isinstance(taken, Exception):
                raise taken
            return taken
        if measure_after > 0:
            return self._facts_then_measure(limit, measure_after, pairs_after)
        if self.views_with_facts and limit is None and not self.views and len(self.info.hosts) >= 2:
            found, checks = ansible.run_playbooks(
                [ansible.Part(FACTS_PLAYBOOK), ansible.Part(CHECKS_PLAYBOOK)], self.inventory)
            facts = self._facts_of(found)
            with contextlib.suppress(PlaybookFailed, BenchmarkError):
                self.views = views_of(checks)
            return facts
        return self._facts_of(ansible.run_playbook(FACTS_PLAYBOOK, self.inventory, limit=limit))

    def _facts_then_measure(
        self, limit: str | None, repetitions: int, pairs_after: int
    ) -> dict[str, dict[str, Any]]:
        """The facts read (of the hosts of ``limit``) and the batch after it in one Ansible run; the
        batch and its rounds (or why they failed) are kept for the next ``measure`` call."""
        read = ansible.Part(FACTS_PLAYBOOK, {HOSTS_VAR: limit} if limit is not None else {})
        self.prefetched_batch = None
        planned = self._plan_measure(repetitions, pairs_after)
        outcomes = ansible.run_playbooks([read, *planned.parts], self.inventory,
                                         timeout_s=ansible.RUN_TIMEOUT_S + planned.timeout_s)
        facts = self._facts_of(outcomes[0])  # raises where the read failed: the batch is not taken
        self._keep_batch(repetitions, pairs_after, lambda: self._batch_of(planned, outcomes[1:], pairs_after))
        return facts

    def _keep_batch(self, repetitions: int, pairs_after: int, assemble: Callable[[], Batch]) -> None:
        """Keep a batch measured ahead for the next ``measure`` call of ``repetitions`` and
        ``pairs_after``: the batch ``assemble`` returns, or the fabtune error it raised, which that
        call raises."""
        try:
            batch = assemble()
        except FabtuneError as err:
            self.prefetched_batch = (repetitions, pairs_after, err)
        else:
            self.prefetched_batch = (repetitions, pairs_after, batch)

    @staticmethod
    def _facts_of(outcome: ansible.RunOutcome) -> dict[str, dict[str, Any]]:
        outcome.raise_for_failure("reading facts")
        found = {}
        for task in outcome.tasks:
            facts = task.result.get("ansible_facts", {}).get("fabric_facts")
            if facts is not None:
                found[task.host] = dict(facts)
        return found

    def learn(self, facts: Mapping[str, Mapping[str, Any]]) -> None:
        """Take each host's GPU count, RDMA netdevs and NIC line rates from its facts (for measurements)."""
        self.netdevs = {
            h: [p["netdev"] for p in (f.get("hardware") or {}).get("ports") or [] if p.get("netdev")]
            for h, f in facts.items()
        }
        self.hw_reads = {
            h: [
                rdmacounters.read_item(p["netdev"], p["dev"], int(p.get("port") or 1))
                for p in (f.get("hardware") or {}).get("ports") or []
                if p.get("netdev") and p.get("dev")
            ]
            for h, f in facts.items()
        }
        first = facts[sorted(facts)[0]]
        matrix = ((first.get("hardware") or {}).get("topology") or {}).get("matrix") or {}
        self.gpus = self.gpus or max(1, len([r for r in matrix if str(r).startswith("GPU")]))
        self.ceilings = busbw_ceilings(facts)

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
    ) -> ansible.RunOutcome:
        """Apply per-host desired states; with ``run_id``, each host first arms a revert to ``snapshots``.

        Only the hosts of ``desired`` are touched (a move limited to the hosts that need it).
        ``roles``: only these roles run (the knobs of the others are already as desired).
        ``measure_after``: the caller's next call is ``measure`` of that many repetitions: the
        batch runs in the same Ansible run, right after the apply (bench_measure.yml runs on no host
        unless every host came through the apply), and that call returns it; on some hosts only,
        where ``_measures_after`` says it can. ``pairs_after``: with that batch, the caller will
        later ask for that many ``pairs`` of the state the apply leaves (while nothing changes, as
        many more batches as it likes in between): where the hosts' views are known, those rounds
        run in the same Ansible run, right after the batch. ``facts_after``: the caller's next call is
        ``facts`` of every host: where the apply and the read run on every host, the read runs in
        the same Ansible run (on the hosts the apply left in it), and that call returns it where
        the apply succeeded."""
        extravars: dict[str, Any] = {
            "fabric_desired_by_host": trees_of(desired),
            "fabric_enforce_couplings": not exact,
        }
        if roles is not None:
            extravars["fabric_roles"] = list(roles)
        if self.revert_installed:
            extravars["fabric_revert_installed_hosts"] = sorted(self.revert_installed)
        if self.boot_installed:
            extravars["fabric_boot_installed_hosts"] = sorted(self.boot_installed)
        if run_id is not None and snapshots is not None:
            extravars.update(
                fabric_revert_run_id=run_id,
                fabric_revert_deadline_s=self.deadline_s,
                fabric_revert_apply_s=self.apply_allowance_s(),
                fabric_revert_snapshots=trees_of(snapshots),
            )
        limit = self._limit(desired)
        self.counters = None  # the move changes the ports: the next benchmark reads them before
        self.prefetched = []  # and its rounds measure the new state
        # The roles' tasks carry their role's name as a tag: with --tags, Ansible leaves the other
        # roles' tasks out when it loads the play, instead of skipping each on every host
        tags = list(roles) if roles else []
        self.prefetched_batch, self.prefetched_facts = None, None
        start = time.monotonic()
        if measure_after > 0 and self._measures_after(limit, roles):
            outcome = self._apply_then_measure(extravars, tags, measure_after, start, limit=limit,
                                                   pairs_after=pairs_after)
        elif facts_after and limit is None and self.limit is None:
            outcome = self._apply_then_read(extravars, tags, start)
        else:
            try:
                outcome = ansible.run_playbook("apply.yml", self.inventory, extravars=extravars, limit=limit,
                                               tags=tags)
            finally:
                self.longest_apply_s = max(self.longest_apply_s, time.monotonic() - start)
        self.revert_installed |= installed_on(outcome, REVERT_INSTALL_TASK)
        self.boot_installed |= installed_on(outcome, BOOT_INSTALL_TASK)
        return outcome

    def _measures_after(self, limit: str | None, roles: Sequence[str] | None) -> bool:
        """Whether a move's apply on the hosts of ``limit`` (None: every host) can run its first
        batch, which runs on every host, in the same Ansible run.

        On every host, always. On some hosts only, where this backend runs on every host and the
        move names its roles, the subnet manager's not among them: the apply's plays are then held
        to the move's hosts by ``fabric_hosts`` instead of ``--limit``, and the subnet manager's
        play (on its own group, which ``fabric_hosts`` does not narrow) runs no role."""
        if limit is None:
            return True
        return self.limit is None and roles is not None and "ib_sm" not in roles

    def _apply_then_measure(
        self, extravars: Mapping[str, Any], tags: Sequence[str], repetitions: int, start: float,
        *, limit: str | None = None, pairs_after: int = 0,
    ) -> ansible.RunOutcome:
        """The apply (on the hosts of ``limit``; None: every host), the batch after it (on every
        host) and ``pairs_after`` pair rounds after that, in one Ansible run; the batch (or why it
        failed) is kept for the next ``measure`` call, the rounds for the ``pairs`` calls, where the
        apply succeeded everywhere. A host the apply failed on is in no later play: the batch's
        first play then fails the run before any launch (bench_measure.yml)."""
        planned = self._plan_measure(repetitions, pairs_after)  # the apply changed the ports: read before
        held = {HOSTS_VAR: limit} if limit is not None else {}
        # the batch's and rounds' tasks carry no role's tag: imported with "always", the run's
        # --tags keep them
        after = [dataclasses.replace(part, tags=("always",)) for part in planned.parts]
        applied, *measured = self._apply_with([ansible.Part("apply.yml", held), *after], extravars, tags,
                                              start, planned.timeout_s)
        if applied.ok:  # the batch alone is what the next measure call asks for; the rounds wait
            self._keep_batch(repetitions, 0, lambda: self._batch_of(planned, measured, pairs_after))
        return applied

    def _apply_then_read(
        self, extravars: Mapping[str, Any], tags: Sequence[str], start: float
    ) -> ansible.RunOutcome:
        """The apply and the facts read after it in one Ansible run; the facts (or why they could
        not be read) are kept for the next ``facts`` call where the apply succeeded."""
        # the facts role's tasks carry no role's tag of the apply: imported with "always"
        parts = [ansible.Part("apply.yml"), ansible.Part(FACTS_PLAYBOOK, {}, ("always",))]
        applied, read = self._apply_with(parts, extravars, tags, start, 0)
        if applied.ok:
            try:
                self.prefetched_facts = self._facts_of(read)
            except PlaybookFailed as err:  # what the facts call would have raised, it raises
                self.prefetched_facts = err
        return applied

    def _apply_with(
        self, parts: Sequence[ansible.Part], extravars: Mapping[str, Any], tags: Sequence[str], start: float,
        after_s: int,
    ) -> list[ansible.RunOutcome]:
        """The apply (the first part) and what follows it (the others) in one Ansible run; the
        apply's time is the run's less the later parts' (from their first play on)."""
        try:
            applied, *after = ansible.run_playbooks(parts, self.inventory, extravars=extravars, tags=tags,
                                                    timeout_s=ansible.RUN_TIMEOUT_S + after_s)
        except BaseException:
            self.longest_apply_s = max(self.longest_apply_s, time.monotonic() - start)
            raise
        self.longest_apply_s = max(self.longest_apply_s,
                                   time.monotonic() - start - sum(o.seconds for o in after))
        return [applied, *after]

    def apply_allowance_s(self) -> int:
        """Seconds an armed apply may take on top of the deadline before a host reverts mid-apply."""
        return max(APPLY_ALLOWANCE_S, int(2 * self.longest_apply_s + 0.5))

    def confirm(self, run_id: str, *, hosts: Sequence[str] | None = None) -> ansible.RunOutcome:
        """Cancel the armed reverts of ``run_id`` on ``hosts`` (None: every host); a host that already
        reverted the run fails, its result says ``reverted``.

        Over the direct SSH channel (``fabtune-revert --confirm``, the module's own code), one command
        per host. Where this backend's applies installed that program on every host confirmed, its
        answers are the outcome. Where they did not (a rollback's or an uninstall's backend, after the
        run that installed it), a host that neither confirmed nor answers that it already reverted
        (the program is missing there, or older than the verb: usage, exit 2) is confirmed through
        playbooks/confirm.yml. Where the inventory's connection settings are not ones the channel
        follows, every host is.

        Raises:
            HostKeyRejected: a host's SSH host key is unknown or changed.
        """
        limit = self._limit(hosts)
        chosen = sorted(self.info.hosts) if limit is None else limit.split(",")
        found = self._direct(chosen)
        if found is None:
            return self._confirm_playbook(run_id, limit)
        argv = [REVERT_SCRIPT, CONFIRM_FLAG, run_id]
        done = sshdirect.run(found, argv, forks=ansible.forks_for(self.inventory), root=True)
        if set(chosen) <= self.revert_installed:
            return ansible.recorded("confirm", [confirm_result(r) for r in done.values()])
        answered = [r for r in done.values() if r.rc in (0, EXIT_REVERTED)]
        rest = sorted(set(chosen) - {r.host for r in answered})
        direct = ansible.recorded("confirm", [confirm_result(r) for r in answered]) if answered else None
        if not rest:
            assert direct is not None
            return direct
        played = self._confirm_playbook(run_id, ",".join(rest))
        return played if direct is None else combined(direct, played)

    def confirms_aside(self, hosts: Sequence[str]) -> bool:
        """Whether ``confirm`` on ``hosts`` goes over the direct SSH channel alone, which runs no
        playbook and touches none of this backend's state: this backend's applies installed
        ``fabtune-revert`` on each of them, and the channel follows the inventory."""
        limit = self._limit(hosts)
        chosen = sorted(self.info.hosts) if limit is None else limit.split(",")
        return set(chosen) <= self.revert_installed and self._direct(chosen) is not None

    def _confirm_playbook(self, run_id: str, limit: str | None) -> ansible.RunOutcome:
        return ansible.run_playbook("confirm.yml", self.inventory, extravars={"fabric_run_id": run_id},
                                    limit=limit)

    def extend(self, run_id: str, *, hosts: Sequence[str] | None = None) -> ansible.RunOutcome:
        """Move the revert deadline of ``run_id`` on ``hosts`` (None: every host; each must hold the
        run armed) to ``deadline_s`` from now (fails where a host already reverted it: the result
        says ``reverted``).

        Over a direct SSH channel (``fabtune-revert --extend``, the module's own code), one command per
        host; through playbooks/extend.yml where the inventory's connection settings are not ones the
        channel follows (``sshdirect.Unsupported``).

        Raises:
            HostKeyRejected: a host's SSH host key is unknown or changed.
        """
        limit = self._limit(hosts)
        chosen = sorted(self.info.hosts) if limit is None else limit.split(",")
        found = self._direct(chosen)
        if found is None:
            return ansible.run_playbook("extend.yml", self.inventory, extravars={
                "fabric_run_id": run_id, "fabric_revert_deadline_s": self.deadline_s}, limit=limit)
        argv = [REVERT_SCRIPT, EXTEND_FLAG, run_id, str(int(self.deadline_s))]
        done = sshdirect.run(found, argv, forks=ansible.forks_for(self.inventory), root=True)
        return ansible.recorded("extend", [extend_result(r) for r in done.values()])

    def _direct(self, hosts: Sequence[str]) -> dict[str, sshdirect.Target] | None:
        """The direct channel's targets, or None where the channel cannot follow the inventory."""
        try:
            return self._targets(hosts)
        except sshdirect.Unsupported:
            return None

    def _targets(self, hosts: Sequence[str]) -> dict[str, sshdirect.Target]:
        """The direct channel's targets (the host variables the inventory's read found)."""
        if self._hostvars is None:
            self._hostvars = hostvars_of(self.info)
        if any(v.get("fabric_revert_script") not in (None, REVERT_SCRIPT) for v in self._hostvars.values()):
            raise sshdirect.Unsupported(str(self.inventory), ["fabric_revert_script: not the default"])
        return sshdirect.targets(self._hostvars, hosts, ansible.ssh_args())

    def prerun(self, run_id: str) -> dict[str, HostState]:
        """Per host, the pre-run snapshot the host kept for ``run_id`` (hosts without one are left out).

        Raises:
            PlaybookFailed: a host could not be reached (its record cannot be read).
        """
        path = prerun_record_path(run_id)
        outcome = ansible.run_module("ansible.builtin.slurp", {"src": path}, self.inventory)
        if outcome.unreachable_hosts:
            outcome.raise_for_failure(f"reading the hosts' pre-run records of {run_id}")
        found: dict[str, HostState] = {}
        for task in outcome.tasks:
            content = task.result.get("content")
            if task.failed or not content:
                continue
            try:
                found[task.host] = HostState.from_tree(json.loads(base64.b64decode(content))["snapshot"])
            except (ValueError, KeyError, TypeError) as err:
                raise PlaybookFailed(
                    f"{task.host}: {prerun_record_path(run_id)} is not a pre-run record: {err}"
                ) from err
        return found

    def diagnose(self, log: str, why: str) -> diagnose.Diagnosis:
        """A failed job judged by host: its NCCL log with each host's GID table (``show_gids``).

        Raises:
            PlaybookFailed: a host could not be read.
        """
        views = read_hosts(self.inventory)
        return diagnose.diagnose_job(
            self.info.hosts, log, failed=True, why=why, gids=diagnose.gid_tables(views)
        )

    def pair_matrix(self, full: bool) -> list[PairResult]:
        """ib_write_bw between host pairs, every rail: the one round of the pair schedule that puts
        every host in a pair, or with ``full`` every pair (n - 1 rounds).

        Raises:
            PlaybookFailed: a host could not be read or a round could not run.
        """
        self.counters = None  # its rounds' traffic is not the next benchmark's
        self.prefetched, self.prefetched_batch = [], None
        if not self.views:  # read once: no move changes the hosts' rails, devices or addresses
            self.views = read_hosts(self.inventory)
        views = self.views
        hosts = sorted(views)
        if len(hosts) < 2:
            return []
        rails = min(len(v.rails) for v in views.values())
        rounds = pair_rounds(hosts, rails) if full else rail_pairs(covering_rounds(hosts), rails)
        done = pairs.run_rounds(
            self.inventory, rounds, views, PerftestOptions(duration_s=2), deadline_s=self.info.bench_timeout_s
        )
        return [r for rnd in done for r in rnd]

    def _spec(self) -> MeasureSpec:
        launch_host = self.info.hosts[0] if self.info.hosts else ""
        return MeasureSpec(
            self.inventory,
            self.info.hosts,
            self.gpus,
            self.netdevs or {},
            self.info.launcher,
            self.info.oob_interface,
            deadline_s=self.info.bench_timeout_s,
            ceilings=self.ceilings or {},
            hw_reads=self.hw_reads,
            rsh_site=self.rsh_site[1] if self.rsh_site and self.rsh_site[0] == launch_host else None,
        )

    def _took(self, spec: MeasureSpec, batch: Batch) -> Batch:
        """Keep what the batch read of its launch host's Open MPI settings for the next batch."""
        if batch.rsh_site and spec.hosts:
            self.rsh_site = (spec.hosts[0], batch.rsh_site)
        return batch

    def measure(self, repetitions: int, pairs_after: int = 0) -> Batch:
        """``repetitions`` of (all_reduce, alltoall) on the rack as it is.

        ``pairs_after``: the caller's next calls are that many ``pairs``: where the hosts' views are
        known, those rounds run in the same Ansible run, right after the batch, and the calls
        return them. A batch with a failed launch discards them (they run again when asked).
        A batch alone leaves the rounds measured before it for the ``pairs`` calls: it changes
        nothing they measured.
        """
        taken, self.prefetched_batch = self.prefetched_batch, None
        if taken is not None and taken[:2] == (repetitions, pairs_after):
            if isinstance(taken[2], Exception):
                raise taken[2]
            return taken[2]
        if pairs_after <= 0 or not self.views:  # a batch alone: measure plans and runs it
            before, self.counters = self.counters, None
            spec = self._spec()
            batch = self._took(spec, measure(spec, repetitions, before))
            self.counters = batch.after or None
            return batch
        planned = self._plan_measure(repetitions, pairs_after)
        outcomes = ansible.run_playbooks(planned.parts, self.inventory, timeout_s=planned.timeout_s)
        return self._batch_of(planned, outcomes, pairs_after)

    def _plan_measure(self, repetitions: int, pairs_after: int) -> _PlannedMeasure:
        """A batch and, where the hosts' views are known, ``pairs_after`` pair rounds after it."""
        spec = self._spec()
        before, self.counters, self.prefetched = self.counters, None, []
        rounds = (rdma_cm.plan(self.views, self.info.bench_timeout_s, self.lead_extra_s)
                  if pairs_after > 0 and self.views else [])
        planned = plan_batch(spec, repetitions, before)
        parts = [ansible.Part(MEASURE_PLAYBOOK, planned.variables)]
        held = rdmacounters.will_read(planned.reads)  # the batch's read after
        for _ in range(pairs_after if rounds else 0):
            parts += rdma_cm.parts(rounds, held)
            held = rdmacounters.will_read(rounds[-1].reads)
        timeout_s = planned.timeout_s + (pairs_after * sum(r.timeout_s for r in rounds) if rounds else 0)
        return _PlannedMeasure(spec, planned, rounds, parts, timeout_s)

    def _batch_of(
        self, planned: _PlannedMeasure, outcomes: Sequence[ansible.RunOutcome], pairs_after: int
    ) -> Batch:
        """The batch of a planned measurement from its parts' outcomes; its rounds, each in turn,
        are kept for the ``pairs`` calls (or why one failed, which that call raises)."""
        batch = self._took(planned.spec, batch_of(planned.spec, planned.batch, outcomes[0]))
        if batch.failures:
            return batch  # the counters after the rounds are not known to the batch: none held
        self.counters = batch.after or None
        rounds = planned.rounds
        measured: list[rdma_cm.PairRound] = []
        for index in range(pairs_after if rounds else 0):
            span = slice(1 + index * len(rounds), 1 + (index + 1) * len(rounds))
            mine = list(zip(planned.parts[span], outcomes[span], strict=True))
            try:
                found, self.counters = rdma_cm.assemble(self.views, rounds, mine, self.counters)
            except FabtuneError as err:  # what the pairs call would have raised, it raises
                self.counters = None
                self.prefetched.append(err)
                break
            self.counters = self.counters or None
            measured.append(found)
            self.prefetched.append(found)
        if measured:  # every round ran with the lead they were planned with: one step from it
            late = {h: max(r.late.get(h, 0.0) for r in measured) for r in measured for h in r.late}
            waited = {h: min(r.waited.get(h, 0.0) for r in measured) for r in measured for h in r.waited}
            self.lead_extra_s = more_lead(self.lead_extra_s, late, waited)
        return dataclasses.replace(batch, rounds_s=sum(o.seconds for o in outcomes[1:]))

    def pairs(self) -> rdma_cm.PairRound | None:
        """One pair round and one incast stage over rdma_cm (None: fewer than 2 hosts to pair).

        The hosts' views (rails, devices, addresses) are read once: no move changes them.

        Raises:
            PlaybookFailed: a host could not be read, or a round could not run.
        """
        if len(self.info.hosts) < 2:
            return None
        if self.prefetched:
            taken = self.prefetched.pop(0)
            if isinstance(taken, Exception):
                raise taken
            return taken
        before, self.counters = self.counters, None
        if not self.views:
            self.views = read_hosts(self.inventory)
        found, self.counters = rdma_cm.measure(self.inventory, self.views, self.info.bench_timeout_s, before,
                                               lead_extra_s=self.lead_extra_s)
        self.counters = self.counters or None
        self.lead_extra_s = more_lead(self.lead_extra_s, found.late, found.waited)
        return found
