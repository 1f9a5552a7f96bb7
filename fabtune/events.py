"""Progress: one event type for every long run (tune, bootstrap, drift, the pair rounds, uninstall).

An event is ``(kind, message, data)``: ``kind`` says what happened (``run``, ``phase``, ``round``,
``baseline``, ``move``, ``measure``, ``decision``, ``rollback``, ...), ``message`` is the line a
person reads, ``data`` the same facts for a program (``round``/``rounds``/``eta_s`` for a round).
The CLI's sink (``fabtune.commands._progress.Progress``) prints them; libraries only emit.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

Event = Callable[[str, str, Mapping[str, Any]], None]


def quiet(_kind: str, _message: str, _data: Mapping[str, Any]) -> None:
    """The sink when nobody listens."""


def phases(on_event: Event | None, **data: Any) -> Callable[[str], None]:
    """A one-argument sink for a library's phase lines: each becomes a ``phase`` event with ``data``."""
    emit = on_event or quiet

    def say(message: str) -> None:
        emit("phase", message, dict(data))

    return say


def round_event(phase: str, index: int, total: int, eta_s: float | None) -> tuple[str, str, dict[str, Any]]:
    """The ``round`` event of round ``index`` of ``total`` (``eta_s``: the time the rest should take)."""
    eta = round(eta_s) if eta_s else None
    message = f"{phase}: round {index}/{total}" + (f", about {eta} s left" if eta else "")
    return "round", message, {"phase": phase, "round": index, "rounds": total, "eta_s": eta}
