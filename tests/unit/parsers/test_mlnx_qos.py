"""mlnx_qos parser: both mlnx_qos fixtures and the mlnx_qos excerpt of the spiderpool script."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from fabtune.errors import ParseError
from fabtune.perf.parsers import mlnx_qos

Loader = Callable[[str], str]


def test_dscp_trust_partial_head(sample: Loader) -> None:
    qos = mlnx_qos.parse(sample("mlnx_qos__dscp_trust_os_dcbx_partial_head__husky.txt"))
    assert qos.dcbx_mode == "OS controlled"
    assert qos.trust == "dscp"
    assert qos.dscp2prio[0] == (7, 6, 5, 4, 3, 2, 1, 0)
    assert qos.dscp2prio[3] == (31, 30, 29, 28, 27, 26, 25, 24)
    assert qos.prio_of_dscp(26) == 3
    assert qos.prio_of_dscp(48) == 6
    assert qos.pfc_enabled == ()
    assert qos.tcs == ()


def test_full_whitespace_collapsed(sample: Loader) -> None:
    qos = mlnx_qos.parse(
        sample(
            "mlnx_qos__full_dscp_trust_pfc_ets_whitespace_collapsed__"
            "cnblogs-mellanox-community-copy.txt"
        )
    )
    assert qos.trust == "dscp"
    assert qos.dscp2prio[7] == (63, 62, 61, 60, 59, 58, 57, 56)
    assert qos.cable_len == 10
    assert qos.pfc_enabled == (True, False, True, False, False, False, True, True)
    assert qos.pfc_priorities == (0, 2, 6, 7)
    assert [tc.tc for tc in qos.tcs] == [0, 1, 2, 3, 4, 5, 6]
    assert qos.tcs[0].priorities == (1,)
    assert qos.tcs[1].priorities == (0,)
    assert qos.tcs[0].tsa == "ets"
    assert qos.tcs[0].bw_percent == 10
    assert qos.tcs[0].ratelimit_gbps is None
    assert qos.tcs[6].tsa == "strict"
    assert qos.tcs[6].bw_percent is None
    assert qos.tc_of_priority(1).tc == 0
    with pytest.raises(KeyError):
        qos.tc_of_priority(7)  # the copy ends before tc 6's priority lines


def test_spiderpool_script_excerpt(sample: Loader) -> None:
    qos = mlnx_qos.parse(
        sample(
            "mlx5-sysfs__ecn_enable_cnp_dscp_traffic_class_via_script_with_mlnx_qos_excerpt__"
            "spiderpool.txt"
        )
    )
    assert qos.trust == "dscp"
    assert qos.dcbx_mode is None
    assert qos.pfc_priorities == (5,)
    assert qos.pfc_buffer == (0, 0, 0, 0, 0, 1, 0, 0)


def test_buffers_and_rate_limit() -> None:
    text = (
        "DCBX mode: Firmware controlled\n"
        "Priority trust state: pcp\n"
        "Receive buffer size (bytes): 130944,130944,0,0,0,0,0,0,max_buffer_size=262016\n"
        "Cable len: 7\n"
        "PFC configuration:\n"
        "\tpriority    0   1   2   3   4   5   6   7\n"
        "\tenabled     0   0   0   1   0   0   0   0   \n"
        "\tbuffer      0   0   0   1   0   0   0   0   \n"
        "tc: 0 ratelimit: 25.0 Gbps, tsa: ets, bw: 50%\n"
        "\t priority:  0\n"
        "\t priority:  1\n"
    )
    qos = mlnx_qos.parse(text)
    assert qos.dcbx_mode == "Firmware controlled"
    assert qos.buffer_sizes == (130944, 130944, 0, 0, 0, 0, 0, 0)
    assert qos.max_buffer_size == 262016
    assert qos.pfc_buffer == (0, 0, 0, 1, 0, 0, 0, 0)
    assert qos.tcs[0].ratelimit_gbps == 25.0
    assert qos.tcs[0].priorities == (0, 1)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "no mlnx_qos output found"),
        ("Interface name is required\n", "no mlnx_qos output found"),
        ("PFC configuration:\n\tenabled 0 0 0 1\n", "has 4 columns, expected 8"),
        ("\t priority:  3\n", "before any 'tc: N ratelimit:'"),
        ("dscp:07,06,\n", "without a preceding 'prio:N'"),
    ],
)
def test_garbled_input_raises(text: str, message: str) -> None:
    with pytest.raises(ParseError, match=message):
        mlnx_qos.parse(text)
