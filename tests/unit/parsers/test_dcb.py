"""dcb show parser: every dcb man-page fixture.

The fixtures are man-page examples mixing shell prompts (``# dcb ...``), prose and output; the
test keeps only the output that follows each ``show`` prompt (the parser takes tool output).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from fabtune.errors import ParseError
from fabtune.perf.parsers import dcb

Loader = Callable[[str], str]


def show_outputs(text: str) -> list[str]:
    """Return the output printed after each ``# dcb ... show`` prompt, in order."""
    outputs: list[str] = []
    current: list[str] | None = None
    for line in text.splitlines():
        if line.startswith("# "):
            if current is not None:
                outputs.append("\n".join(current))
            current = [] if " show " in f"{line} " else None
        elif current is not None and line and not line[0].isupper():
            current.append("" if line == "(nothing)" else line)
        elif current is not None:
            outputs.append("\n".join(current))
            current = None
    if current is not None:
        outputs.append("\n".join(current))
    return outputs


def test_pfc(sample: Loader) -> None:
    (output,) = show_outputs(sample("dcb__pfc_set_show_manpage_example__iproute2.txt"))
    show = dcb.parse(output)
    assert show.scalars == {"pfc-cap": "8", "macsec-bypass": "off", "delay": "4096"}
    assert show.pfc_enabled == {0: False, 1: False, 2: False, 3: False, 4: False, 5: False,
                                6: True, 7: True}


def test_ets(sample: Loader) -> None:
    (output,) = show_outputs(sample("dcb__ets_set_show_manpage_example__iproute2.txt"))
    show = dcb.parse(output)
    assert show.int_mapping("prio-tc") == {p: p for p in range(8)}
    assert show.mapping("tc-tsa")["2"] == "ets"
    assert show.mapping("tc-tsa")["3"] == "strict"
    assert show.int_mapping("tc-bw") == {0: 33, 1: 33, 2: 34, 3: 0, 4: 0, 5: 0, 6: 0, 7: 0}


def test_buffer(sample: Loader) -> None:
    (output,) = show_outputs(sample("dcb__buffer_set_show_manpage_example__iproute2.txt"))
    show = dcb.parse(output)
    assert show.int_mapping("prio-buffer")[7] == 7
    sizes = show.mapping("buffer-size")
    assert sizes["0"] == "10Kb"
    assert sizes["6"] == "1Mb"
    assert show.size_bytes(sizes["6"]) == 1024**2
    assert show.scalars["total-size"] == "1222Kb"
    assert show.size_bytes(show.scalars["total-size"]) == 1222 * 1024


def test_maxrate(sample: Loader) -> None:
    (output,) = show_outputs(sample("dcb__maxrate_set_show_manpage_example__iproute2.txt"))
    rates = dcb.parse(output).mapping("tc-maxrate")
    assert rates["0"] == "25Gbit"
    assert rates["6"] == "100Gbit"
    assert len(rates) == 8


def test_apptrust(sample: Loader) -> None:
    (output,) = show_outputs(sample("dcb__apptrust_manpage_example__iproute2.txt"))
    assert dcb.parse(output).order == ("port", "pcp", "ethtype")


def test_app(sample: Loader) -> None:
    outputs = show_outputs(sample("dcb__app_dscp_pcp_prio_manpage_example__iproute2.txt"))
    named, numeric, replaced, flushed, pcp = outputs
    assert dcb.parse(named).arrays["dscp-prio"] == (
        ("0", "0"), ("CS3", "2"), ("CS3", "3"), ("CS6", "6"),
    )
    assert dcb.parse(numeric).arrays["dscp-prio"] == (
        ("0", "0"), ("24", "2"), ("24", "3"), ("48", "6"),
    )
    assert dcb.parse(replaced).int_mapping("dscp-prio") == {0: 0, 24: 4, 48: 6}
    assert flushed == ""
    assert dcb.parse(flushed, allow_empty=True).arrays == {}
    assert dcb.parse(pcp).mapping("pcp-prio") == {"1nd": "1", "2de": "2"}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "no parameter found"),
        ("prio-pfc 0:off 1\n", "expected a parameter name, got .1."),
        ("Prio-pfc 0:off\n", "expected a parameter name"),
        ("pfc-cap 8 delay\n", "'delay' has no value"),
    ],
)
def test_garbled_input_raises(text: str, message: str) -> None:
    with pytest.raises(ParseError, match=message):
        dcb.parse(text)


def test_non_integer_mapping_raises() -> None:
    show = dcb.parse("dscp-prio CS3:2\n")
    with pytest.raises(ParseError, match="not an integer"):
        show.int_mapping("dscp-prio")
    with pytest.raises(ParseError, match="not a buffer size"):
        show.size_bytes("lots")
