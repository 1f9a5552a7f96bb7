"""HostState: one host's managed state, frozen, giving back exactly the tree it came from."""

from __future__ import annotations

import copy
import dataclasses
import json
from typing import Any

import pytest
import yaml

from fabtune.collection import PROFILES
from fabtune.knobs import Change, lossless_change
from fabtune.state import MANAGED, HostState, states_of, trees_of

FACTORY_NIC = {"trust": "pcp", "pfc": [], "dscp2prio": {}, "mtu": 1500, "ecn": {"np": [], "rp": []},
               "prio_tc": [0, 1, 2, 3, 4, 5, 6, 7], "roce_tos": 0}
HARDWARE = {"ports": [{"dev": "mlx5_0", "netdev": "eth2", "roce_v2_gid_index": 3}], "topology": None}
FACTS = json.loads(json.dumps({  # as facts arrive: from JSON, no object shared
    "nics": {"eth2": FACTORY_NIC, "eth3": FACTORY_NIC}, "hardware": HARDWARE, "nccl": None,
    "sm": {"routing_engine": "ftree", "qos": False}}))


def profile_tree(name: str) -> dict[str, Any]:
    return dict(yaml.safe_load((PROFILES / f"{name}.yml").read_text())["fabric_desired"])


def real_trees() -> list[dict[str, Any]]:
    """Shapes the code carries: packaged profiles, a snapshot (nccl.conf absent), a tuned file's
    section read back (keys sorted), a state that leaves sections out, an empty one."""
    return [
        profile_tree("roce"),
        profile_tree("ib"),
        {k: FACTS[k] for k in MANAGED},
        {"nccl": {"NCCL_IB_TC": "106"}, "nics": {"all": {"mtu": 4200}}, "sm": {}},
        {"nics": {"all": {"mtu": 4200}}},
        {"sm": None, "nics": {}},
        {},
    ]


@pytest.mark.parametrize("tree", real_trees())
def test_a_tree_comes_back_exactly_as_json_and_yaml(tree: dict[str, Any]) -> None:
    back = HostState.from_tree(tree).tree()
    assert back == tree
    assert json.dumps(back) == json.dumps(tree)  # same sections, same order
    assert yaml.safe_dump(back, sort_keys=False) == yaml.safe_dump(tree, sort_keys=False)


def test_a_snapshot_is_the_managed_part_of_the_facts_in_managed_order() -> None:
    state = HostState.of_facts({"sm": FACTS["sm"], **FACTS})
    assert state.sections == MANAGED and "hardware" not in state.tree()
    assert state.nccl is None and state.holds("nccl") and state.nics is not None
    assert list(state.nics) == ["eth2", "eth3"] and state.nics["eth2"]["mtu"] == 1500
    assert HostState.of_facts({"nics": {}, "hardware": HARDWARE}).tree() == {"nics": {}}


def test_the_state_is_frozen_all_the_way_down_and_its_tree_is_a_copy() -> None:
    state = HostState.from_tree(profile_tree("roce"))
    with pytest.raises(dataclasses.FrozenInstanceError):
        state.nccl = {}  # type: ignore[misc]
    assert state.nics is not None
    with pytest.raises(TypeError):
        state.nics["all"]["mtu"] = 9000  # type: ignore[index]
    assert state.nics["all"]["pfc"] == (3,)
    tree = state.tree()
    tree["nics"]["all"]["pfc"].append(4)
    assert state.tree() == profile_tree("roce")
    source = {"nics": {"all": {"pfc": [3]}}}
    frozen = HostState.from_tree(source)
    source["nics"]["all"]["pfc"].append(5)
    assert frozen.tree() == {"nics": {"all": {"pfc": [3]}}}


def test_with_change_sets_the_knobs_on_every_nic_and_leaves_the_state_as_it_was() -> None:
    current = HostState.of_facts(FACTS)
    change = lossless_change(3)
    moved = current.with_change(change)
    tree = moved.tree()
    assert list(tree) == ["nics", "nccl", "sm"]
    assert all(nic == {**FACTORY_NIC, **change.nic} for nic in tree["nics"].values())
    assert tree["nccl"] == dict(change.nccl) and tree["sm"] == FACTS["sm"]
    assert current.tree() == {k: FACTS[k] for k in MANAGED}


def test_with_change_adds_the_sections_it_sets_after_the_others() -> None:
    state = HostState.from_tree({"sm": {"qos": True}})
    qps = {"NCCL_IB_QPS_PER_CONNECTION": 2}
    moved = state.with_change(Change(nic={"mtu": 4200}, nccl=qps, sm={"lmc": 1}))
    assert moved.tree() == {"sm": {"qos": True, "lmc": 1}, "nics": {}, "nccl": qps}
    assert list(moved.tree()) == ["sm", "nics", "nccl"]
    assert state.tree() == {"sm": {"qos": True}}


def tree_with_change(current: dict[str, Any], change: Change) -> dict[str, Any]:
    """"current + change" as the untyped tree code computed it before HostState (the reference)."""
    desired = copy.deepcopy(current)
    nics = desired.get("nics") or {}
    desired["nics"] = {dev: {**knobs, **copy.deepcopy(dict(change.nic))} for dev, knobs in nics.items()}
    if change.nccl:
        desired["nccl"] = {**(desired.get("nccl") or {}), **dict(change.nccl)}
    if change.sm:
        desired["sm"] = {**(desired.get("sm") or {}), **dict(change.sm)}
    return desired


@pytest.mark.parametrize("tree", real_trees())
@pytest.mark.parametrize("change", [lossless_change(3), Change(nccl={"NCCL_IB_GID_INDEX": "3"}),
                                    Change(sm={"qos": True}), Change()])
def test_with_change_gives_the_tree_the_untyped_code_gave(tree: dict[str, Any], change: Change) -> None:
    expected = json.loads(json.dumps(tree_with_change(tree, change)))  # tuples as lists
    assert json.dumps(HostState.from_tree(tree).with_change(change).tree()) == json.dumps(expected)


def test_differences_name_each_knob_that_differs_with_its_path() -> None:
    current = HostState.of_facts(FACTS)
    moved = current.with_change(Change(nic={"mtu": 4200}))
    assert current.differences(current) == [] and moved.differences(moved) == []
    assert current.differences(moved) == ["nics.eth2.mtu: 1500 -> 4200", "nics.eth3.mtu: 1500 -> 4200"]
    as_text = HostState.from_tree({"nccl": {"NCCL_IB_GID_INDEX": "3"}})
    assert as_text.differences(HostState.from_tree({"nccl": {"NCCL_IB_GID_INDEX": 3}})) == []
    assert HostState(nccl=None, sections=("nccl",)).differences(HostState(nccl={"A": "1"})) == [
        "nccl: None -> {'A': '1'}"]
    assert HostState(sm={"lmc": 1}).differences(HostState()) == ["sm: {'lmc': 1} -> None"]


def test_a_section_with_a_value_must_be_listed_and_a_section_must_be_a_mapping() -> None:
    with pytest.raises(ValueError, match="leaves out sm"):
        HostState(nics={}, sm={"lmc": 1}, sections=("nics",))
    with pytest.raises(ValueError, match="nccl: 'x' must be a mapping or null"):
        HostState.from_tree({"nccl": "x"})


def test_per_host_trees_and_states_convert_both_ways() -> None:
    trees = {"h01": profile_tree("roce"), "h02": {"nccl": None}}
    states = states_of(trees)
    assert states["h02"] == HostState(nccl=None, sections=("nccl",))
    assert trees_of(states) == trees
