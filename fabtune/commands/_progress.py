"""Live progress for long runs: rich on a terminal, plain lines or JSON lines otherwise."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Mapping
from typing import Any

from rich.console import Console


class Progress:
    """An event sink for the tuning loop and other long runs (``(kind, message, data)``)."""

    def __init__(self, jsonl: bool = False) -> None:
        self.console = Console(stderr=True)
        self.jsonl = jsonl
        self.start = time.monotonic()

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
        style = {"decision": "bold", "move": "cyan", "baseline": "green", "rollback": "yellow"}.get(kind, "")
        text = f"[dim]{elapsed:5.0f}s[/] [{style}]{kind:<9}[/] {message}" if style else \
            f"[dim]{elapsed:5.0f}s[/] {kind:<9} {message}"
        self.console.print(text, highlight=False)


def _jsonable(data: Mapping[str, Any]) -> dict[str, Any]:
    try:
        json.dumps(dict(data))
    except TypeError:
        return {k: str(v) for k, v in data.items()}
    return dict(data)
