"""A VLAN-tagged RoCE rack whose switches trust PCP (fabtune/testbed/specs/roce-vlan-pcp.yml): it
builds, the real fabric_facts sees its RoCEv2 GIDs on the VLAN device, the plan's lossless move
carries NCCL_IB_SL, and the model's all_reduce is faster with NCCL_IB_SL on the lossless priority."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import pytest

from fabtune.inventory import read_inventory
from fabtune.sim.model import expected_busbw
from fabtune.testbed import oracle as testbed_model
from fabtune.testbed.spec import TestbedSpec
from fabtune.tune.backend import AnsibleBackend
from fabtune.tune.hosts import host_groups, plan_rack
from tests.integration.conftest import example_testbed
from tests.integration.tunerack import inventory

pytestmark = pytest.mark.testbed


@pytest.fixture(scope="module")
def rack() -> Iterator[TestbedSpec]:
    yield from example_testbed("roce-vlan-pcp", "vavlan", "10.196")


def test_the_plan_sets_nccl_ib_sl_with_the_lossless_class(rack: TestbedSpec) -> None:
    facts = AnsibleBackend(read_inventory(inventory(rack))).facts()
    ports = facts["h01"]["hardware"]["ports"]
    assert [p["roce_v2_gid_index"] for p in ports] == [5, 5]
    assert all(g["netdev"] == f"{p['netdev']}.100" for p in ports for g in p["gids"] if g["index"] >= 2)
    lossless = plan_rack(host_groups(facts, "roce"))[0]
    assert lossless[0].group == "lossless"
    assert all(m.change.nccl["NCCL_IB_SL"] == str(m.change.nic["pfc"][0]) for m in lossless)


def test_all_reduce_is_faster_with_nccl_ib_sl_on_the_lossless_priority(rack: TestbedSpec) -> None:
    fabric = testbed_model.controller_fabric(rack.name)

    def with_sl(sl: str) -> float:
        hosts = tuple(dataclasses.replace(h, nccl_env=(*h.nccl_env, ("NCCL_IB_SL", sl)))
                      for h in fabric.hosts)
        return expected_busbw(dataclasses.replace(fabric, hosts=hosts), "all_reduce", 8 << 30)

    assert with_sl("3") > with_sl("0") * 1.03
    assert with_sl("0") == expected_busbw(fabric, "all_reduce", 8 << 30)  # unset: SL 0
