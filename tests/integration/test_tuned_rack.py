"""An already-tuned RoCE rack (fabtune/testbed/specs/roce-tuned.yml): nothing to plan, zero moves.

The verbs run here as a wheel built without the emulator would run them (issue 18): a child
interpreter in which ``fabtune.sim`` and ``fabtune.testbed`` cannot be imported runs ``tune`` (no
oracle), ``drift``, ``apply`` and ``bootstrap`` against the rack, all from one profile file: the
tuned desired state the tune run leaves, with the tuning options added beside it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from fabtune.desired import tuned_path
from fabtune.inventory import read_inventory
from fabtune.journal import Journal
from fabtune.testbed.spec import TestbedSpec
from fabtune.tune.backend import AnsibleBackend
from fabtune.tune.hosts import host_groups, plan_rack
from tests.integration.conftest import example_testbed
from tests.integration.tunerack import current_state, inventory
from tests.noemulator import run_cli

pytestmark = pytest.mark.testbed

OPTIONS = {"max_runs": 6, "baseline_runs": 4}


@pytest.fixture(scope="module")
def rack() -> Iterator[TestbedSpec]:
    yield from example_testbed("roce-tuned", "ktund", "10.190")


def test_an_already_tuned_rack_has_nothing_to_plan(rack: TestbedSpec) -> None:
    facts = AnsibleBackend(read_inventory(inventory(rack))).facts()
    view = plan_rack(host_groups(facts, "roce"))
    assert view == [], [[c.name for c in group] for group in view]


def verb(*argv: str) -> dict[str, Any]:
    """One verb, emulator absent, its JSON result on stdout; fails the test with its stderr."""
    done = run_cli([*argv, "--json"])
    assert done.returncode == 0, (argv, done.returncode, done.stderr[-3000:])
    result: dict[str, Any] = json.loads(done.stdout)
    return result


@pytest.mark.timeout(2400)  # a whole tune and a bootstrap on the testbed: minutes, more under load
def test_every_verb_runs_without_the_emulator_from_one_profile(rack: TestbedSpec, tmp_path: Path) -> None:
    inv = str(inventory(rack))
    options = tmp_path / "options.yml"
    options.write_text(yaml.safe_dump({"fabtune_tune": OPTIONS}))
    before = current_state(rack)

    tuned = verb("tune", "-i", inv, "--profile", str(options))
    assert tuned["result"]["moves"] == [], tuned["result"]

    # the tuned state the run left plus the tuning options: one file for every verb
    profile = tmp_path / "profile.yml"
    state = yaml.safe_load(tuned_path(read_inventory(Path(inv)).name).read_text())
    profile.write_text(yaml.safe_dump({**state, "fabtune_tune": OPTIONS}))
    # the rack was tuned by hand (its spec), so nothing fabtune would persist across a reboot is
    # on the hosts yet: apply writes the persisted settings and its files (host code, boot unit), no
    # live knob
    applied = verb("apply", "-i", inv, "--profile", str(profile))
    written = {c["knob"] for changes in applied["changes"].values() for c in changes}
    assert applied["ok"] is True and written, applied
    live = sorted(k for k in written if not k.startswith(("persisted:", "/")))  # neither persisted nor a file
    assert live == [], live
    drift = verb("drift", "-i", inv, "--profile", str(profile))
    assert drift["exit"] == 0 and drift["result"]["report"]["items"] == [], drift
    accepted = verb("bootstrap", "-i", inv, "--profile", str(profile))
    assert accepted["passed"] is True, accepted

    assert current_state(rack) == before  # no live knob changed on a tuned rack, by any verb
    kinds = [r.kind for r in Journal().runs(limit=10)]
    assert kinds[:4] == ["bootstrap", "drift", "apply", "tune"], kinds
    assert applied["run_id"] == Journal().runs(limit=10)[2].id  # the children journaled into this home
