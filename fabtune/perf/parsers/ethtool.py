"""Parse ``ethtool -S <if>`` (NIC statistics).

Layout (ethtool ``do_gnicstats``): a ``NIC statistics:`` line, then one ``     name: value``
line per counter (values are unsigned 64-bit integers). Counter names are driver-specific
(mlx5: ``rx_prio3_pause``, ``tx_pause_ctrl_phy``, ``rx_discards_phy``, ...).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from fabtune.perf.parsers._common import content_lines, fail

TOOL = "ethtool"

_HEADER_RE = re.compile(r"^NIC statistics:\s*$")
# "     rx_prio3_pause: 12" — the name may itself contain ':' or spaces, the value never does.
_COUNTER_RE = re.compile(r"^\s+(?P<name>\S.*?):\s+(?P<value>\d+)\s*$")


@dataclass(frozen=True)
class EthtoolStats:
    """Counters by name, in printed order."""

    counters: dict[str, int] = field(default_factory=dict)

    def __getitem__(self, name: str) -> int:
        """Return one counter (``KeyError`` if the driver does not report it)."""
        return self.counters[name]

    def per_priority(self, template: str) -> dict[int, int]:
        """Collect a per-priority family, e.g. ``rx_prio{}_pause`` -> ``{0: n, ..., 7: n}``.

        Args:
            template: Counter name with ``{}`` where the priority goes.

        Returns:
            Counters found for priorities 0..7 (missing priorities are left out).
        """
        found: dict[int, int] = {}
        for prio in range(8):
            name = template.format(prio)
            if name in self.counters:
                found[prio] = self.counters[name]
        return found


def parse(text: str) -> EthtoolStats:
    """Parse ``ethtool -S`` output.

    Args:
        text: The tool's stdout.

    Returns:
        The counters.

    Raises:
        ParseError: without the ``NIC statistics:`` line, on a line that is not
            ``name: integer``, or when no counter follows the header.
    """
    lines = content_lines(text)
    start = next((i for i, line in enumerate(lines) if _HEADER_RE.match(line)), None)
    if start is None:
        fail(TOOL, "no 'NIC statistics:' line found (is this 'ethtool -S' output?)")
    counters: dict[str, int] = {}
    for number, line in enumerate(lines[start + 1 :], start=start + 2):
        if not line.strip():
            continue
        match = _COUNTER_RE.match(line)
        if match is None:
            fail(TOOL, f"line {number}: expected '    name: integer', got {line.strip()!r}")
        counters[match["name"]] = int(match["value"])
    if not counters:
        fail(TOOL, "'NIC statistics:' is not followed by any counter")
    return EthtoolStats(counters=counters)
