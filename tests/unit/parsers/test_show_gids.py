"""show_gids parser: the show_gids fixture, values read off the sample by hand."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from fabtune.errors import ParseError
from fabtune.perf.parsers import show_gids

Loader = Callable[[str], str]


def test_roce_v1_v2_ipv4_tabs(sample: Loader) -> None:
    gids = show_gids.parse(sample("show_gids__roce_v1_v2_ipv4_tabs__husky.txt"))
    assert gids.n_gids_found == 4
    assert [g.index for g in gids.entries] == [0, 1, 2, 3]
    first = gids.entries[0]
    assert first.gid == "fe80:0000:0000:0000:0ac0:ebff:fe21:03da"
    assert first.ipv4 is None
    assert first.version == "v1"
    assert first.netdev == "rdma0"
    last = gids.entries[3]
    assert (last.device, last.port) == ("mlx5_0", 1)
    assert last.gid == "0000:0000:0000:0000:0000:ffff:c0a8:d3f2"
    assert last.ipv4 == "192.168.211.242"
    assert last.version == "v2"
    found = gids.find("mlx5_0")
    assert found is not None
    assert found.index == 3
    v1_any = gids.find("mlx5_0", version="v1", ipv4=False)
    assert v1_any is not None
    assert v1_any.index == 0
    assert gids.find("mlx5_1") is None


def test_row_without_netdev() -> None:
    gids = show_gids.parse("mlx5_2\t1\t0\tfe80:0000:0000:0000:0ac0:ebff:fe21:03db\t\t\tv1\t\n")
    assert gids.entries[0].netdev is None
    assert gids.n_gids_found is None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "no GID rows found"),
        ("mlx5_0\t1\t0\tnot-a-gid\t\t\tv1\trdma0\n", "line 1"),
        ("mlx5_0\t1\t0\tfe80:0000:0000:0000:0ac0:ebff:fe21:03da\t\t\tv9\trdma0\n", "VER"),
        (
            "mlx5_0\t1\t0\tfe80:0000:0000:0000:0ac0:ebff:fe21:03da\t\t\tv1\trdma0\n"
            "n_gids_found=4\n",
            "truncated",
        ),
    ],
)
def test_garbled_input_raises(text: str, message: str) -> None:
    with pytest.raises(ParseError, match=message):
        show_gids.parse(text)
