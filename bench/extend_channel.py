"""What one extension of a revert deadline costs: the direct SSH channel against extend.yml.

On one 2-host testbed (2 RoCE NICs per host), a move is applied with its revert armed (as
``AnsibleBackend.apply`` does), then each round extends its deadline once through the direct
channel (``AnsibleBackend.extend``: paramiko, ``fabtune-revert --extend`` on every host) and once
through ``playbooks/extend.yml`` (the adapter, as operators run it), alternating, so machine load
falls on both alike. Every extension is checked to have moved both hosts' deadlines.

Usage (root): .venv/bin/python bench/extend_channel.py [--rounds N] [--name N] [--subnet-base B]
Prints a Markdown table (medians, seconds) for docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import statistics
import time

from fabtune import ansible
from fabtune.inventory import read_inventory
from fabtune.testbed import build, layout
from fabtune.testbed.spec import build_spec
from fabtune.tune.backend import EXTEND_TASK, AnsibleBackend
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
    finally:
        build.down(spec.name)
    fast, slow = statistics.median(times[True]), statistics.median(times[False])
    print(f"| step (median of {args.rounds}, s) | extend.yml | direct channel | ratio |")
    print("|---|---|---|---|")
    print(f"| extend the revert deadline, 2 hosts | {slow:.2f} | {fast:.2f} | {fast / slow:.2f}x |")


if __name__ == "__main__":
    main()
