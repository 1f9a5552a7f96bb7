"""``fabtune tune --plan``: the moves a tuning run would try on a rack, and its benchmark work,
read from the hosts with nothing changed.

The hosts' state is read with the facts playbook (read-only); the lossless class is chosen and the
moves planned by the tuning loop's own code (``fabtune.tune.lossless.choose``,
``fabtune.tune.loop.planned_moves``), so the preview is the plan a run would make now. A run plans
after its baseline: where the baseline fails through a host's own fault that a knob fixes, it tries
that repair first and plans from the repaired rack; the preview says so and cannot know it
beforehand. No run is journaled and no lock is taken: nothing is changed on any host.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fabtune.inventory import read_inventory
from fabtune.knobs import GROUP_NAMES, LADDERS, ROLES, Candidate, roles_of
from fabtune.profile import Profile, check_against_rack
from fabtune.tune.backend import AnsibleBackend
from fabtune.tune.loop import REFERENCE_ROUNDS, TuneOptions, plan_work, planned_moves, touches_rdma_cm
from fabtune.tune.lossless import choose as choose_lossless
from fabtune.tune.run import options_from


@dataclass(frozen=True)
class PlannedMove:
    """One candidate move: its group, name, knobs, the roles that apply them (every role where a knob
    has none), the hosts it is for, why it is worth trying, and whether its knobs are ones
    ib_write_bw (rdma_cm) can see (the run then also measures a pair round, unless no NIC it would
    change differs: a lossless move on NICs that run the class already changes NCCL alone)."""

    group: str
    name: str
    knobs: tuple[str, ...]
    roles: tuple[str, ...]
    hosts: tuple[str, ...]
    why: str
    pairs: bool


@dataclass(frozen=True)
class RunBounds:
    """The benchmark work of a run with these options: nccl-tests repetitions (each one
    all_reduce_perf and one alltoall_perf launch) and ib_write_bw rounds."""

    baseline_repetitions: int
    baseline_pair_rounds: int
    per_move_repetitions: tuple[int, int]  # fewest and most, before the kept state's top-up
    top_up_after_keep: int  # a kept state's reference is measured up to the baseline's repetitions
    moves_at_most: int
    moves_at_least: int


@dataclass(frozen=True)
class Plan:
    """What ``fabtune tune`` would try on the rack as it is now (the JSON document of ``--plan``)."""

    kind: str
    inventory: str
    fabric: str
    hosts: tuple[str, ...]
    lossless: Mapping[str, Any] | None  # where the RoCE lossless class came from; None on InfiniBand
    groups: tuple[tuple[PlannedMove, ...], ...]
    skipped_groups: tuple[str, ...]
    bounds: RunBounds
    note: str


def planned_move(cand: Candidate, hosts: Sequence[str]) -> PlannedMove:
    """A candidate as the preview shows it (no hosts named: every host of the rack)."""
    knobs = cand.change.knobs()
    return PlannedMove(cand.group, cand.name, tuple(knobs), roles_of(knobs) or ROLES,
                       tuple(sorted(cand.hosts or hosts)), cand.why, touches_rdma_cm(cand.change))


def bounds(groups: Sequence[Sequence[Candidate]], options: TuneOptions, pairs: bool) -> RunBounds:
    """The run's benchmark work: at least one move per group (a group stops at its first kept
    alternative; a ladder at its first rung that does not pay), at most every candidate."""
    policy = options.policy
    work = plan_work(groups, options, run_s=0.0, pair_s=0.0)  # the counts; no rates before a baseline
    return RunBounds(
        baseline_repetitions=options.baseline_runs,
        baseline_pair_rounds=REFERENCE_ROUNDS if pairs else 0,
        per_move_repetitions=(policy.min_runs, policy.max_runs),
        top_up_after_keep=options.baseline_runs,
        moves_at_most=work.moves_at_most,
        moves_at_least=work.moves_at_least,
    )


def preview(inventory: Path, raw_options: Mapping[str, Any] | None = None,
            profile: Profile | None = None) -> Plan:
    """The plan a tuning run would make on ``inventory`` now, its options from ``raw_options``
    (a profile's ``fabtune_tune`` section, checked as a run checks it).

    Raises:
        ConfigError: a bad option, inventory or profile (nothing is read from the hosts).
        PlaybookFailed: a host could not be read.
    """
    info = read_inventory(inventory)
    if profile is not None:
        check_against_rack(profile, info)
    options, deadline = options_from(raw_options, info)
    facts = AnsibleBackend(info, deadline).facts()
    choice = choose_lossless(facts, options.lossless, info.fabric)
    hosts = sorted(facts)
    candidates = planned_moves(facts, info.fabric, choice, options)
    groups = tuple(tuple(planned_move(c, hosts) for c in group) for group in candidates)
    pairs = len(hosts) >= 2  # the baseline's ib_write_bw reference: any rack with a pair to measure
    ladders = ", ".join(sorted(LADDERS))
    note = (
        "A run plans after its baseline: where the baseline fails through a host's own fault that a "
        "knob fixes, it tries that repair first and plans from the repaired rack. Within a group the "
        f"run keeps at most one alternative; a ladder ({ladders}) stops at its first rung that does "
        "not pay. Nothing was changed on any host."
    )
    lossless = choice.to_json() if info.fabric == "roce" else None  # IB: credit-based, no class
    return Plan("tune_plan", str(info.path), info.fabric, tuple(hosts), lossless, groups,
                tuple(g for g in GROUP_NAMES if g in options.skip_groups),
                bounds(candidates, options, pairs), note)
