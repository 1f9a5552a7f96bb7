"""QoS through mlnx_qos and dcb: parse, diff, argv lists, round trips against the emulated tools."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.fabtune.fabric.plugins.module_utils.fabric_host import (
    netdev_split,
    rdma_ports,
    read_nic_sysfs,
)
from ansible_collections.fabtune.fabric.plugins.module_utils.fabric_qos_backend import (
    QosError,
    dcb_problem,
    diff_state,
    parse,
    parse_mlnx_qos,
    read_argvs,
    write_argvs,
)

from fabtune.sim.node import NodeState, provision
from fabtune.sim.tools import dcb, mlnx_qos
from tests.unit.sim_tools.conftest import roce_node

TOOLS = {"mlnx_qos": mlnx_qos.main, "dcb": dcb.main}

SAMPLE = """DCBX mode: OS controlled
Priority trust state: dscp
dscp2prio mapping:
\tprio:0 dscp:07,06,05,04,03,02,01,00,
\tprio:3 dscp:31,30,29,28,27,26,25,24,
default priority:
Receive buffer size (bytes): 130944,130944,0,0,0,0,0,0,max_buffer_size=262016
Cable len: 7
PFC configuration:
\tpriority    0   1   2   3   4   5   6   7
\tenabled     0   0   0   1   0   0   0   0\x20\x20\x20
\tbuffer      0   0   0   1   0   0   0   0\x20\x20\x20
tc: 0 ratelimit: unlimited, tsa: ets, bw: 50%
\t priority:  0
\t priority:  1
tc: 3 ratelimit: unlimited, tsa: ets, bw: 50%
\t priority:  3
tc: 6 ratelimit: unlimited, tsa: strict
\t priority:  6
"""

DESIRED: dict[str, Any] = {
    "trust": "dscp", "dscp2prio": {26: 3, 48: 6}, "pfc": [3],
    "prio_tc": [0, 1, 2, 3, 4, 5, 6, 7],
    "tsa": ["ets", "ets", "ets", "ets", "ets", "ets", "strict", "ets"],
    "tcbw": [10, 10, 10, 40, 10, 10, 0, 10],
}


def test_parse_mlnx_qos_sample() -> None:
    state = parse_mlnx_qos(SAMPLE)
    assert state["trust"] == "dscp"
    assert state["pfc"] == [3]
    assert state["dscp2prio"][26] == 3
    assert state["prio_tc"][:4] == [0, 0, 0, 3]
    assert state["tsa"][6] == "strict"
    assert state["tcbw"][3] == 50


def test_parse_mlnx_qos_refuses_other_text() -> None:
    with pytest.raises(QosError):
        parse_mlnx_qos("Interface name is required\n")


def test_diff_manages_only_named_dscps() -> None:
    current = {"trust": "dscp", "dscp2prio": {d: d >> 3 for d in range(64)}, "pfc": []}
    changes = diff_state(current, {"dscp2prio": {26: 3, 48: 5}, "pfc": [3]})
    assert changes == {"dscp2prio": ({48: 6}, {48: 5}), "pfc": ([], [3])}


def test_mlnx_qos_argvs_set_map_before_trust_and_never_mix_them() -> None:
    changes = diff_state({"trust": "pcp", "pfc": []}, DESIRED)
    argvs = write_argvs("mlnx_qos", "eth9", changes, DESIRED)
    assert argvs[0] == ["mlnx_qos", "-i", "eth9", "--dscp2prio", "set,26,3", "--dscp2prio", "set,48,6"]
    assert "--trust" in argvs[1] and "--dscp2prio" not in argvs[1]
    assert all(isinstance(a, str) for argv in argvs for a in argv)


def test_dcb_argvs_set_trust_through_dscp_app_entries() -> None:
    # no `dcb apptrust` (unknown to iproute2 6.1, EOPNOTSUPP on mlx5): trust dscp is the map's
    # entries, added (not replaced: mlx5 already replaces the old entry on add)
    desired = {"pfc": [3], "trust": "dscp", "dscp2prio": {26: 3}}
    changes = diff_state({"trust": "pcp", "pfc": [], "prio_tc": [0] * 8}, desired)
    argvs = write_argvs("dcb", "eth9", changes, desired)
    assert argvs == [["dcb", "app", "add", "dev", "eth9", "dscp-prio", "26:3"],
                     ["dcb", "pfc", "set", "dev", "eth9", "prio-pfc", "0:off", "1:off", "2:off", "3:on",
                      "4:off", "5:off", "6:off", "7:off"]]
    # trust dscp without a map: the default map's 64 entries (as mlnx_qos --trust dscp does)
    argvs = write_argvs("dcb", "eth9", diff_state({"trust": "pcp"}, {"trust": "dscp"}), {"trust": "dscp"})
    assert argvs[0][:6] == ["dcb", "app", "add", "dev", "eth9", "dscp-prio"]
    assert argvs[0][6:] == [f"{d}:{d >> 3}" for d in range(64)]
    # trust pcp: every DSCP entry deleted
    back = diff_state({"trust": "dscp", "dscp2prio": {26: 3}}, {"trust": "pcp"})
    assert write_argvs("dcb", "eth9", back, {"trust": "pcp"}) == [
        ["dcb", "app", "flush", "dev", "eth9", "dscp-prio"]]
    assert not any("apptrust" in argv for argv in argvs)


# `dcb -j ... show` outputs of an mlx5 port (the formats of iproute2 6.1.0 and 6.2.0 are the same
# for these objects; only `apptrust` differs, which the backend does not read)
PFC_JSON = ('{"pfc_cap":8,"macsec_bypass":false,"delay":7,'
            '"prio_pfc":[false,false,false,true,false,false,false,false]}')
ETS_JSON = ('{"willing":false,"ets_cap":8,"cbs":false,"tc_bw":[50,50,0,0,0,0,0,0],'
            '"pg_bw":[0,0,0,0,0,0,0,0],"tc_tsa":["ets","ets","strict","strict","strict","strict","strict","strict"],'
            '"prio_tc":[0,0,0,1,0,0,0,0]}')


def test_parse_dcb_reads_trust_from_the_dscp_entries() -> None:
    assert read_argvs("dcb", "eth9") == [
        ["dcb", "-j", "pfc", "show", "dev", "eth9"], ["dcb", "-j", "ets", "show", "dev", "eth9"],
        ["dcb", "-j", "app", "show", "dev", "eth9", "dscp-prio"]]
    state = parse("dcb", [PFC_JSON, ETS_JSON, '{"dscp_prio":[[26,3],[48,6]]}'])
    assert (state["trust"], state["dscp2prio"], state["pfc"]) == ("dscp", {26: 3, 48: 6}, [3])
    assert state["prio_tc"][3] == 1 and state["tsa"][2] == "strict"
    state = parse("dcb", [PFC_JSON, ETS_JSON, "{}"])  # no DSCP entries: the driver trusts PCP
    assert state["trust"] == "pcp" and "dscp2prio" not in state


@pytest.mark.parametrize(("text", "ok"), [
    ("dcb utility, iproute2-6.1.0\n", True), ("dcb utility, iproute2-6.2.0\n", True),
    ("dcb utility, iproute2-5.12.0\n", True), ("dcb utility, iproute2-5.11.0\n", False),
    ("", False)])
def test_dcb_problem_names_version_and_need(text: str, ok: bool) -> None:
    problem = dcb_problem(text)
    assert (problem is None) == ok
    if problem is not None:
        assert "iproute2 5.12 or later" in problem and "mlnx_qos" in problem
        assert ("iproute2 5.11.0" in problem) == ("5.11" in text)


def _run(state: NodeState, argv: list[str]) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        rc = TOOLS[argv[0]](argv[1:], state)
    assert rc == 0, (argv, out.getvalue())
    return out.getvalue()


def _read(state: NodeState, backend: str, netdev: str) -> dict[str, Any]:
    return parse(backend, [_run(state, argv) for argv in read_argvs(backend, netdev)])


@pytest.mark.parametrize(("backend", "iproute2"), [
    ("mlnx_qos", "6.1.0"), ("dcb", "6.1.0"), ("dcb", "6.2.0"), ("dcb", "6.10.0")])
def test_round_trip_against_emulated_tools(tmp_path: Path, backend: str, iproute2: str) -> None:
    node = roce_node()
    node["tools"] = {"iproute2": iproute2}
    provision(tmp_path, node, {})
    state = NodeState.under(tmp_path)
    before = _read(state, backend, "ens1np0")
    assert before["trust"] == "pcp" and before["pfc"] == []
    changes = diff_state(before, DESIRED)
    assert set(changes) == {"trust", "dscp2prio", "pfc", "prio_tc", "tsa", "tcbw"}
    for argv in write_argvs(backend, "ens1np0", changes, dict(before, **DESIRED)):
        _run(state, argv)
    after = _read(state, backend, "ens1np0")
    assert diff_state(after, DESIRED) == {}
    assert state.get_pfc("ens1np0").enabled == (0, 0, 0, 1, 0, 0, 0, 0)
    assert state.get_dscp2prio("ens1np0")[26] == 3
    back = diff_state(after, {"trust": "pcp", "pfc": []})
    for argv in write_argvs(backend, "ens1np0", back, {"trust": "pcp", "pfc": []}):
        _run(state, argv)
    assert state.get_trust("ens1np0") == "pcp"
    assert diff_state(_read(state, backend, "ens1np0"), {"trust": "pcp", "pfc": []}) == {}
    # a changed map entry under DSCP trust, then nothing left to do
    for desired in (DESIRED, dict(DESIRED, dscp2prio={26: 4, 48: 6})):
        changes = diff_state(_read(state, backend, "ens1np0"), desired)
        for argv in write_argvs(backend, "ens1np0", changes, desired):
            _run(state, argv)
        assert diff_state(_read(state, backend, "ens1np0"), desired) == {}


def test_sysfs_reads_of_a_provisioned_node(tmp_path: Path) -> None:
    provision(tmp_path, roce_node(), {})
    ports = rdma_ports(str(tmp_path))
    assert ports[0]["dev"] == "mlx5_0" and ports[0]["netdev"] == "ens1np0"
    assert ports[0]["link_layer"] == "Ethernet"
    roce, _other = netdev_split(str(tmp_path))
    assert "ens1np0" in roce
    nic = read_nic_sysfs(str(tmp_path), "ens1np0")
    assert nic["ecn"] == {"np": list(range(8)), "rp": list(range(8))}
    assert (nic["cnp_dscp"], nic["cnp_prio"]) == (48, 6)
