"""What one extension of a revert deadline, and one confirmation, cost: the direct SSH channel
against extend.yml and confirm.yml.

On one 2-host testbed (2 RoCE NICs per host), a move is applied with its revert armed (as
``AnsibleBackend.apply`` does), then each round extends its deadline once through the direct
channel (``AnsibleBackend.extend``: paramiko, ``fabtune-revert --extend`` on every host) and once
through ``playbooks/extend.yml`` (the adapter, as operators run it), alternating, so machine load
falls on both alike. Every extension is checked to have moved both hosts' deadlines. Then each
round arms the move again (not timed) and confirms it, once through the direct channel
(``AnsibleBackend.confirm``: ``fabtune-revert --confirm``, where the backend's apply installed it)
and once through ``playbooks/confirm.yml``; every confirmation is checked to have cancelled an
armed revert on both hosts.

Usage (root): .venv/bin/python bench/extend_channel.py [--rounds N] [--name N] [--subnet-base B]
Prints a Markdown table (medians, seconds) for docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import statistics
import time

from fabtune import ansible
from fabtune.inventory import read_inventory
from fabtune.state import HostState
from fabtune.testbed import build, layout
from fabtune.testbed.spec import build_spec
from fabtune.tune.backend import CONFIRM_TASK, EXTEND_TASK, AnsibleBackend
from fabtune.tune.state import snapshot_of

DEADLINE_S = 300
RUN_ID = "bench-extend"


def extended(outcome: ansible.RunOutcome, since: float) -> None:
    """Check that every host's deadline moved past ``since``."""
    outcome.raise_for_failure("extend")
    deadlines = [float(r["deadline"]) for r in outcome.results(EXTEND_TASK).values()]
    assert len(deadlines) == 2 and min(deadlines) > since + DEADLINE_S - 5, deadlines


def timed(backend: AnsibleBackend, direct: bool) -> float:
    start_wall, start = time.time(), time.monotonic()
    if direct:
        outcome = backend.extend(RUN_ID)
    else:
        outcome = ansible.run_playbook("extend.yml", backend.inventory, extravars={
            "fabric_run_id": RUN_ID, "fabric_revert_deadline_s": DEADLINE_S})
    took = time.monotonic() - start
    extended(outcome, start_wall)
    return took


def confirmed(outcome: ansible.RunOutcome) -> None:
    """Check that both hosts had the run armed and no longer have."""
    outcome.raise_for_failure("confirm")
    assert len(outcome.results(CONFIRM_TASK)) == 2, outcome.tasks
    assert [outcome.changed_count(h) for h in sorted(outcome.stats.get("ok", {}))] == [1, 1], outcome.stats


def timed_confirm(backend: AnsibleBackend, snap: dict[str, HostState], direct: bool) -> float:
    backend.apply(snap, run_id=RUN_ID, snapshots=snap).raise_for_failure("armed apply")
    start = time.monotonic()
    if direct:
        outcome = backend.confirm(RUN_ID)
    else:
        outcome = ansible.run_playbook("confirm.yml", backend.inventory, extravars={"fabric_run_id": RUN_ID})
    took = time.monotonic() - start
    confirmed(outcome)
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--name", default="pkext")
    parser.add_argument("--subnet-base", default="10.233")
    args = parser.parse_args()
    spec = build_spec({"name": args.name, "subnet_base": args.subnet_base, "seed": 5, "hosts": 2,
                       "nics_per_host": 2, "gpus_per_host": 2})
    build.up(spec)
    try:
        info = read_inventory(layout.testbed_dir(spec.name) / "inventory.yml")
        backend = AnsibleBackend(info, DEADLINE_S)
        snap = {h: snapshot_of(f) for h, f in backend.facts().items()}
        backend.apply(snap, run_id=RUN_ID, snapshots=snap).raise_for_failure("armed apply")
        times: dict[bool, list[float]] = {True: [], False: []}
        for _ in range(args.rounds):
            for direct in (True, False):
                times[direct].append(timed(backend, direct))
        backend.confirm(RUN_ID).raise_for_failure("confirm")
        confirms: dict[bool, list[float]] = {True: [], False: []}
        for _ in range(args.rounds):
            for direct in (True, False):
                confirms[direct].append(timed_confirm(backend, snap, direct))
    finally:
        build.down(spec.name)
    print(f"| step (median of {args.rounds}, s) | playbook | direct channel | ratio |")
    print("|---|---|---|---|")
    for what, found in (("extend the revert deadline (extend.yml), 2 hosts", times),
                        ("confirm the run (confirm.yml), 2 hosts", confirms)):
        fast, slow = statistics.median(found[True]), statistics.median(found[False])
        print(f"| {what} | {slow:.2f} | {fast:.2f} | {fast / slow:.2f}x |")


if __name__ == "__main__":
    main()
