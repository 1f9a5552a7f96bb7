"""Where a test run's Ansible time goes: every playbook run fabtune made, by playbook.

fabtune keeps each Ansible run's artifacts under ``FABTUNE_HOME/ansible/artifacts/STAMP-PLAYBOOK-ID``
(ansible-runner's ``command`` file written at the start, ``status`` at the end, ``job_events``).
This reads every such directory under the given roots (a pytest base temp holds one FABTUNE_HOME
per worker and test) and prints, per playbook: runs, total and median wall time, and the start-up
part (from the runner's ``command`` file to the first job event, ``playbook_on_start``: Python,
ansible-core and the collection loading before any task).

Usage: .venv/bin/python bench/suite_playbooks.py ROOT [ROOT...]   (e.g. /tmp/pytest-of-root/pytest-7)
Prints a Markdown table (seconds) for docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path


@dataclass(frozen=True)
class PlaybookRun:
    playbook: str
    wall_s: float
    startup_s: float | None


def _first_event_time(events: Path) -> float | None:
    """The ``created`` time of the run's first job event (counter 1), as epoch seconds."""
    first = sorted(events.glob("1-*.json"))
    if not first:
        return None
    try:
        created = json.loads(first[0].read_text()).get("created")
        return datetime.fromisoformat(created).timestamp() if created else None
    except (OSError, ValueError):
        return None


def read_run(directory: Path) -> PlaybookRun | None:
    """One artifact directory (``STAMP-PLAYBOOK-ID``) as a run, or None when it did not finish."""
    parts = directory.name.split("-")
    command, status = directory / "command", directory / "status"
    if len(parts) < 3 or not command.is_file() or not status.is_file():
        return None
    start, end = command.stat().st_mtime, status.stat().st_mtime
    first = _first_event_time(directory / "job_events")
    return PlaybookRun("-".join(parts[1:-1]), end - start, None if first is None else first - start)


def runs_under(roots: list[Path]) -> list[PlaybookRun]:
    found = []
    for root in roots:
        for artifacts in root.rglob("ansible/artifacts"):
            for directory in sorted(p for p in artifacts.iterdir() if p.is_dir()):
                run = read_run(directory)
                if run is not None:
                    found.append(run)
    return found


def table(runs: list[PlaybookRun]) -> str:
    by_book: dict[str, list[PlaybookRun]] = defaultdict(list)
    for run in runs:
        by_book[run.playbook].append(run)
    total = sum(r.wall_s for r in runs) or 1.0
    lines = ["| playbook | runs | total (s) | share | median (s) | start-up, median (s) |",
             "|---|---|---|---|---|---|"]
    for book, group in sorted(by_book.items(), key=lambda kv: -sum(r.wall_s for r in kv[1])):
        walls = [r.wall_s for r in group]
        starts = [r.startup_s for r in group if r.startup_s is not None]
        start = f"{statistics.median(starts):.1f}" if starts else "-"
        lines.append(f"| {book} | {len(group)} | {sum(walls):.0f} | {sum(walls) / total:.0%} | "
                     f"{statistics.median(walls):.1f} | {start} |")
    starts = [r.startup_s for r in runs if r.startup_s is not None]
    lines.append(f"| all | {len(runs)} | {sum(r.wall_s for r in runs):.0f} | 100% | "
                 f"{statistics.median(r.wall_s for r in runs):.1f} | "
                 f"{statistics.median(starts):.1f} |" if runs and starts else "| all | 0 | 0 | | | |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("roots", nargs="+", type=Path)
    args = parser.parse_args(argv)
    runs = runs_under(args.roots)
    if not runs:
        print("no finished Ansible runs under " + ", ".join(map(str, args.roots)), file=sys.stderr)
        return 1
    print(table(runs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
