"""The emulated dcb behaves as the iproute2 release the host has, on an mlx5 driver.

Sources: iproute2 ``dcb/dcb.c`` (``dcb_cmd()``'s object table, ``main()``'s getopt_long) at
v6.1.0 and v6.2.0, ``dcb/dcb_app.c``, ``dcb/dcb_apptrust.c``; the kernel's
drivers/net/ethernet/mellanox/mlx5/core/en_dcbnl.c (``mlx5e_dcbnl_ieee_setapp``/``_delapp``,
``mlx5e_dcbnl_ops`` without apptrust ops).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fabtune.sim.node import NodeState, provision
from fabtune.sim.tools import dcb

from .conftest import roce_node

IF = "ens1np0"


def host(tmp_path: Path, iproute2: str | None) -> NodeState:
    node = roce_node()
    if iproute2 is not None:
        node["tools"] = {"iproute2": iproute2}
    provision(tmp_path, node, {})
    return NodeState.under(tmp_path)


def run(state: NodeState, argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = dcb.main(argv, state=state)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_6_1_has_no_apptrust(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    state = host(tmp_path, None)  # a host that names no release: Debian 12's 6.1.0
    assert run(state, ["-V"], capsys)[1] == "dcb utility, iproute2-6.1.0\n"
    # as Debian 12's /usr/sbin/dcb prints it: the error, and the empty JSON output's newline
    code, out, err = run(state, ["-j", "apptrust", "show", "dev", IF], capsys)
    assert (code, out, err) == (1, "\n", 'Object "apptrust" is unknown\n')
    code, _, err = run(state, ["help"], capsys)
    assert "OBJECT := { app | buffer | dcbx | ets | maxrate | pfc }" in err
    code, _, err = run(state, ["app", "add", "dev", IF, "pcp-prio", "1nd:1"], capsys)
    assert code == 1 and err.startswith('What is "pcp-prio"?\n')
    assert "pcp-prio" not in err.split("\n", 1)[1]  # 6.1's dcb_app_help_add
    code, _, err = run(state, ["rewr", "show", "dev", IF], capsys)
    assert (code, err) == (1, 'Object "rewr" is unknown\n')


def test_6_2_has_apptrust_that_mlx5_does_not_implement(tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    state = host(tmp_path, "6.2.0")
    assert run(state, ["-V"], capsys)[1] == "dcb utility, iproute2-6.2.0\n"
    code, _, err = run(state, ["help"], capsys)
    assert "OBJECT := { app | apptrust | buffer | dcbx | ets | maxrate | pfc }" in err
    code, out, err = run(state, ["-j", "apptrust", "show", "dev", IF], capsys)
    assert (code, out, err) == (1, "\n", "Attribute not found: Success\n")
    code, _, err = run(state, ["apptrust", "set", "dev", IF, "order", "dscp", "pcp"], capsys)
    assert (code, err) == (1, "Attribute write: Operation not supported\n")
    assert state.get_trust(IF) == "pcp"
    code, _, err = run(state, ["apptrust", "set", "dev", IF, "order", "dscp", "dscp"], capsys)
    assert (code, err) == (1, "Duplicate selector: dscp\nInvalid list of selectors\n")
    code, _, err = run(state, ["apptrus", "show", "dev", IF], capsys)  # strcmp, not matches()
    assert (code, err) == (1, 'Object "apptrus" is unknown\n')


@pytest.mark.parametrize("iproute2", ["6.1.0", "6.2.0"])
def test_trust_follows_the_dscp_app_entries(tmp_path: Path, iproute2: str,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    state = host(tmp_path, iproute2)
    assert run(state, ["app", "add", "dev", IF, "dscp-prio", "26:3", "48:6"], capsys)[0] == 0
    assert state.get_trust(IF) == "dscp"  # the first DSCP entry switched it
    assert state.get_dscp2prio(IF)[26] == 3
    _, out, _ = run(state, ["app", "show", "dev", IF, "dscp-prio", "-j"], capsys)  # -j anywhere
    assert json.loads(out) == {"dscp_prio": [[26, 3], [48, 6]]}
    # deleting an entry whose priority is not the map's: ENOENT from mlx5e_dcbnl_ieee_delapp
    code, _, err = run(state, ["app", "del", "dev", IF, "dscp-prio", "26:5"], capsys)
    assert (code, err) == (1, "Attribute write: No such file or directory\n")
    assert run(state, ["app", "del", "dev", IF, "dscp-prio", "26:3"], capsys)[0] == 0
    assert state.get_trust(IF) == "dscp" and state.get_dscp2prio(IF)[26] == 0
    assert run(state, ["app", "del", "dev", IF, "dscp-prio", "48:6"], capsys)[0] == 0
    assert state.get_trust(IF) == "pcp"  # the last one switched it back


def test_replace_of_a_dscp_entry_fails_after_the_change(tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    state = host(tmp_path, None)
    run(state, ["app", "add", "dev", IF, "dscp-prio", "26:3"], capsys)
    code, _, err = run(state, ["app", "replace", "dev", IF, "dscp-prio", "26:5"], capsys)
    assert (code, err) == (1, "Attribute write: No such file or directory\n"
                              "Could not remove replaced APP entries\n")
    assert state.dscp_app_entries(IF) == {26: 5}
    assert run(state, ["app", "add", "dev", IF, "dscp-prio", "26:4"], capsys)[0] == 0
    assert state.dscp_app_entries(IF) == {26: 4}


def test_options_anywhere_and_getopt_errors(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    state = host(tmp_path, None)
    code, out, _ = run(state, ["pfc", "show", "dev", IF, "-j"], capsys)
    assert code == 0 and json.loads(out)["pfc_cap"] == 8
    code, _, err = run(state, ["--verbose", "pfc", "show", "dev", IF], capsys)
    assert code == 1 and err.startswith("dcb: unrecognized option '--verbose'\nUnknown option.\n")
    code, _, err = run(state, ["-v", "pfc", "show", "dev", IF], capsys)
    assert code == 1 and err.startswith("Unknown option.\n")
