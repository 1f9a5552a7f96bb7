"""Live progress for long runs: rich on a terminal, plain lines or JSON lines otherwise.

Events are ``(kind, message, data)`` (:mod:`fabtune.events`), the one type every library emits: the
tuning loop's (``run``, ``phase``, ``baseline``, ``move``, ``measure``, ``decision``, ``rollback``),
bootstrap's and drift's ``phase`` events, and the pair rounds' ``round`` events with ``round``,
``rounds`` and ``eta_s`` (``fabtune.perf.pairs.run_rounds``). On a terminal: a line per event, a
spinner with the current phase, a bar and the ETA for rounds. Not on a terminal: ``[  12s] kind:
message`` lines on stderr. With ``jsonl``: one JSON object per event on stdout (``t``, ``kind``,
``message`` and the event's data), for automation.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from rich.console import Console

from fabtune.commands import _console
from fabtune.events import Event

STYLE = {
    "decision": "bold",
    "move": "cyan",
    "baseline": "green",
    "rollback": "yellow",
    "round": "magenta",
    "phase": "blue",
}


class Progress:
    """An event sink for the tuning loop and other long runs (``(kind, message, data)``)."""

    def __init__(self, jsonl: bool = False, console: Console | None = None) -> None:
        self.console = console or _console.err()  # a progress line is never cut
        self.jsonl = jsonl
        self.start = time.monotonic()
        self._status: Any = None

    def __call__(self, kind: str, message: str, data: Mapping[str, Any]) -> None:
        elapsed = time.monotonic() - self.start
        if self.jsonl:
            record = {"t": round(elapsed, 1), "kind": kind, "message": message, **_jsonable(data)}
            sys.stdout.write(json.dumps(record) + "\n")
            sys.stdout.flush()
            return
        if not self.console.is_terminal:
            self.console.print(f"[{elapsed:6.0f}s] {kind}: {message}", markup=False, highlight=False)
            return
        if kind == "round" and data.get("rounds"):
            message = f"{message}  {_bar(int(data['round']), int(data['rounds']))}" + (
                f" ETA {_clock(float(data['eta_s']))}" if data.get("eta_s") is not None else ""
            )
        style = STYLE.get(kind, "")
        label = f"[{style}]{kind:<9}[/]" if style else f"{kind:<9}"
        self.console.print(f"[dim]{elapsed:5.0f}s[/] {label} ", end="", highlight=False)
        self.console.print(message, markup=False, highlight=False)
        if self._status is not None:
            self._status.update(message)

    @contextmanager
    def status(self, run: str) -> Iterator[Event]:
        """This sink inside a spinner showing the latest message (on a terminal only)."""
        if self.jsonl or not self.console.is_terminal:
            yield self
            return
        with self.console.status(run) as shown:
            self._status = shown
            try:
                yield self
            finally:
                self._status = None


def _bar(done: int, total: int, width: int = 20) -> str:
    filled = round(width * (done - 1) / total) if total else 0
    return "[" + "#" * filled + "-" * (width - filled) + f"] {done}/{total}"


def _clock(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds // 60:.0f} min {seconds % 60:02.0f} s"


def _jsonable(data: Mapping[str, Any]) -> dict[str, Any]:
    try:
        json.dumps(dict(data))
    except TypeError:
        return {k: str(v) for k, v in data.items()}
    return dict(data)
