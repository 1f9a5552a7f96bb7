"""ethtool -S parser (no public fixture: samples follow ethtool's do_gnicstats layout)."""

from __future__ import annotations

import pytest

from fabtune.errors import ParseError
from fabtune.perf.parsers import ethtool

SAMPLE = """NIC statistics:
     rx_packets: 1234567
     tx_packets: 7654321
     rx_prio0_pause: 0
     rx_prio3_pause: 42
     tx_prio3_pause: 17
     rx_discards_phy: 3
     ch0_arm: 18446744073709551615
"""


def test_counters() -> None:
    stats = ethtool.parse(SAMPLE)
    assert stats["rx_packets"] == 1234567
    assert stats.counters["rx_discards_phy"] == 3
    assert stats["ch0_arm"] == 2**64 - 1
    assert stats.per_priority("rx_prio{}_pause") == {0: 0, 3: 42}
    assert list(stats.counters)[:2] == ["rx_packets", "tx_packets"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "no 'NIC statistics:' line"),
        ("NIC statistics:\n", "not followed by any counter"),
        ("NIC statistics:\n     rx_packets: lots\n", "line 2"),
        ("NIC statistics:\n     rx_packets: 12\nrx_bytes 7\n", "line 3"),
    ],
)
def test_garbled_input_raises(text: str, message: str) -> None:
    with pytest.raises(ParseError, match=message):
        ethtool.parse(text)
