"""ibdev2netdev parser: both fixtures, values read off the samples by hand."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from fabtune.errors import ParseError
from fabtune.perf.parsers import ibdev2netdev

Loader = Callable[[str], str]


def test_twelve_devices_column_t_with_comments(sample: Loader) -> None:
    mapping = ibdev2netdev.parse(
        sample(
            "ibdev2netdev__12_devices_column_t_with_author_comments__imbue-cluster-health-issue4.txt"
        )
    )
    assert len(mapping.entries) == 12
    assert mapping.entries[0] == ibdev2netdev.IbDevNetDev("mlx5_0", 1, "ibp26s0", up=False)
    assert mapping.netdev_of("mlx5_1") == "enp27s0f0np0"
    assert mapping.entries[1].up is True
    assert mapping.netdev_of("mlx5_10") == "ibp204s0"
    assert mapping.netdev_of("mlx5_7") == "enp157s0f0np0"
    assert [e.device for e in mapping.entries if e.up] == ["mlx5_1", "mlx5_7"]
    with pytest.raises(KeyError):
        mapping.netdev_of("mlx5_1", port=2)


def test_single_vf_down(sample: Loader) -> None:
    mapping = ibdev2netdev.parse(
        sample("ibdev2netdev__single_vf_in_pod_down_raw__sriov-network-operator-issue382.txt")
    )
    assert mapping.entries == (ibdev2netdev.IbDevNetDev("mlx5_3", 1, "net1", up=False),)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "no mapping found"),
        ("mlx5_0 port 1 ==> ib0\n", "line 1"),
        ("mlx5_0 port x ==> ib0 (Up)\n", "line 1"),
    ],
)
def test_garbled_input_raises(text: str, message: str) -> None:
    with pytest.raises(ParseError, match=message):
        ibdev2netdev.parse(text)
