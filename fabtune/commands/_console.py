"""The consoles every verb prints through: rich on a terminal, plain text in a pipe.

Captured without a terminal (``fabtune runs | cat``, a cron job, CI), rich would wrap at 80
columns and cut table cells with an ellipsis: run ids, paths and commands would be split or
shortened. There the console has no width to fit, no colour and no highlighting; on a terminal it
is rich's own. ``NO_COLOR`` is honoured by rich itself.
"""

from __future__ import annotations

import sys
from contextvars import ContextVar

from rich.console import Console

# Wide enough that no table or line is ever folded or cut when nothing bounds the width.
PIPE_WIDTH = 100_000
# ``fabtune -q``: progress, status and notes on stderr are left out (errors are printed by the CLI's
# own console, never this one; results on stdout stay).
QUIET: ContextVar[bool] = ContextVar("fabtune_quiet", default=False)


def out() -> Console:
    """The console for results (stdout)."""
    return _console(stderr=False)


def err() -> Console:
    """The console for progress and status (stderr); silent under ``fabtune -q``."""
    if QUIET.get():
        return Console(stderr=True, quiet=True)
    return _console(stderr=True)


def _console(stderr: bool) -> Console:
    stream = sys.stderr if stderr else sys.stdout
    if stream.isatty():
        return Console(stderr=stderr, soft_wrap=True)
    return Console(stderr=stderr, soft_wrap=True, width=PIPE_WIDTH, no_color=True, highlight=False)
