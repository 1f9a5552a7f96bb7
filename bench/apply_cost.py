"""What one tuning move costs in Ansible, today's collection against an earlier one, side by side.

On one 2-host testbed (the demo rack's shape: 2 RoCE NICs per host, factory defaults), each round
times, for each collection: a move applied with its revert armed (the MTU toggled between 1500 and
4200 through ``playbooks/apply.yml``, as ``AnsibleBackend.apply`` calls it, the current collection
with the move's roles only), its confirm, and the rollback apply (the snapshot, exactly). The
collections alternate within each round, so machine load falls on both alike. The earlier
collection is taken from git (``git archive REV``) and run through the same adapter
(``fabtune.ansible``), pointed at it.

Usage (root): .venv/bin/python bench/apply_cost.py [--baseline REV] [--rounds N] [--nics N]
[--scoped-baseline] [--untagged-baseline] [--hosts N]. ``--nics`` sets the RoCE NICs per host (the
per-port tasks' cost grows with it); ``--scoped-baseline`` lets the earlier collection also apply
only the move's roles (it must know ``fabric_roles``: commit 7c80544 or later);
``--untagged-baseline`` runs the baseline's applies without ``--tags`` (the move's roles selected by
``fabric_roles`` alone, as before commit 694e1bf: every other role's tasks skipped on each host), so
``--baseline HEAD --scoped-baseline --untagged-baseline`` measures the tags alone. Prints a Markdown
table (medians, seconds) for docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from gitrev import extract

from fabtune import ansible
from fabtune.inventory import read_inventory
from fabtune.knobs import roles_of
from fabtune.state import HostState, states_of, trees_of
from fabtune.testbed import build, layout
from fabtune.testbed.spec import build_spec
from fabtune.tune.backend import AnsibleBackend
from fabtune.tune.state import snapshot_of

CONTENT = "fabtune/content"
SPEC = {"name": "bapc", "subnet_base": "10.226", "seed": 5, "hosts": 2, "nics_per_host": 2,
        "gpus_per_host": 2, "initial": {"trust": "pcp", "pfc": [0] * 8, "roce_tos": 0, "mtu": 1500},
        "switch": {"pfc_priorities": [3], "ecn_priorities": [3], "trust": "dscp"}}


@contextmanager
def untagged(on: bool) -> Iterator[None]:
    """Applies without --tags while ``on`` (the roles still selected by fabric_roles)."""
    if not on:
        yield
        return
    saved = ansible.run_playbook

    def run_playbook(*args: Any, **kwargs: Any) -> ansible.RunOutcome:
        kwargs.pop("tags", None)
        return saved(*args, **kwargs)

    ansible.run_playbook = run_playbook
    try:
        yield
    finally:
        ansible.run_playbook = saved


@contextmanager
def collection_at(rev: str | None) -> Iterator[None]:
    """Point the adapter at the collection of git revision ``rev`` (None: this checkout's)."""
    if rev is None:
        yield
        return
    saved = (ansible.COLLECTIONS, ansible.PLAYBOOKS)
    with tempfile.TemporaryDirectory(prefix="fabtune-apply-cost-") as tmp:
        extract(rev, CONTENT, Path(tmp), 60)
        root = Path(tmp) / CONTENT
        ansible.COLLECTIONS = root
        ansible.PLAYBOOKS = root / "ansible_collections/fabtune/fabric/playbooks"
        try:
            yield
        finally:
            ansible.COLLECTIONS, ansible.PLAYBOOKS = saved


def toggled(state: Mapping[str, HostState]) -> dict[str, HostState]:
    moved = trees_of(state)
    for tree in moved.values():
        for nic in tree["nics"].values():
            nic["mtu"] = 4200 if nic.get("mtu") != 4200 else 1500
    return states_of(moved)


def one_move(backend: AnsibleBackend, run_id: str, scoped: bool) -> dict[str, float]:
    """Apply a move armed, confirm it, then roll it back; seconds for each."""
    snap = {h: snapshot_of(f) for h, f in backend.facts().items()}
    roles = roles_of(["mtu"]) if scoped else None
    times: dict[str, float] = {}
    start = time.monotonic()
    backend.apply(toggled(snap), run_id=run_id, snapshots=snap, roles=roles).raise_for_failure("move")
    times["armed apply"] = time.monotonic() - start
    start = time.monotonic()
    backend.confirm(run_id).raise_for_failure("confirm")
    times["confirm"] = time.monotonic() - start
    start = time.monotonic()
    backend.apply(snap, exact=True, roles=roles).raise_for_failure("rollback")
    times["rollback apply"] = time.monotonic() - start
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", default="70d6044", help="git revision of the earlier collection")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--nics", type=int, default=SPEC["nics_per_host"], help="RoCE NICs per host")
    parser.add_argument("--scoped-baseline", action="store_true",
                        help="the earlier collection also applies only the move's roles")
    parser.add_argument("--untagged-baseline", action="store_true",
                        help="the baseline's applies without --tags (fabric_roles alone)")
    parser.add_argument("--hosts", type=int, default=SPEC["hosts"], help="hosts of the testbed")
    args = parser.parse_args()
    os.environ.setdefault("FABTUNE_HOME", tempfile.mkdtemp(prefix="fabtune-bench-"))
    spec = build_spec({**SPEC, "nics_per_host": args.nics, "hosts": args.hosts})
    build.up(spec)
    try:
        backend = AnsibleBackend(read_inventory(layout.testbed_dir(spec.name) / "inventory.yml"), 300)
        runs: dict[str, list[dict[str, float]]] = {"baseline": [], "current": []}
        for n in range(args.rounds):
            for which, rev in (("baseline", args.baseline), ("current", None)):
                with collection_at(rev), untagged(which == "baseline" and args.untagged_baseline):
                    scoped = rev is None or args.scoped_baseline
                    runs[which].append(one_move(backend, f"bench-{which}-{n}", scoped=scoped))
    finally:
        build.down(spec.name)
    print(f"{args.hosts} hosts, {args.nics} RoCE NICs per host")
    print(f"| step (median of {args.rounds}, s) | {args.baseline} | current | ratio |")
    print("|---|---|---|---|")
    for step in ("armed apply", "confirm", "rollback apply"):
        old = statistics.median(r[step] for r in runs["baseline"])
        new = statistics.median(r[step] for r in runs["current"])
        print(f"| {step} | {old:.1f} | {new:.1f} | {new / old:.2f}x |")


if __name__ == "__main__":
    main()
