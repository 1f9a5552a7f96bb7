"""An already-tuned RoCE rack (fabtune/testbed/specs/roce-tuned.yml): nothing to plan, zero moves."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from fabtune.inventory import read_inventory
from fabtune.testbed import oracle as testbed_model
from fabtune.testbed.spec import TestbedSpec
from fabtune.tune import run as tune_run
from fabtune.tune.backend import AnsibleBackend
from fabtune.tune.hosts import host_groups, plan_rack
from tests.integration.conftest import example_testbed
from tests.integration.tunerack import inventory

pytestmark = pytest.mark.testbed


@pytest.fixture(scope="module")
def rack() -> Iterator[TestbedSpec]:
    yield from example_testbed("roce-tuned", "ktund", "10.190")


def test_an_already_tuned_rack_has_nothing_to_plan(rack: TestbedSpec) -> None:
    facts = AnsibleBackend(read_inventory(inventory(rack))).facts()
    view = plan_rack(host_groups(facts, "roce"))
    assert view == [], [[c.name for c in group] for group in view]


@pytest.mark.timeout(1500)  # a whole tune on the testbed: minutes, more on a loaded machine
def test_tune_keeps_zero_moves_on_an_already_tuned_rack(rack: TestbedSpec) -> None:
    result, _report = tune_run.tune(inventory(rack), {"max_runs": 6, "baseline_runs": 4},
                                    oracle=testbed_model.testbed_oracle)
    assert [(m.name, m.outcome) for m in result.moves] == []
