"""The SM flavor in the plan: adaptive routing is offered only where the SM is NVIDIA's (issue 13:
upstream opensm has no ar_* engine; it logs the name and routes with minhop)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from fabtune.errors import ConfigError
from fabtune.inventory import read_inventory
from fabtune.knobs import View, plan
from fabtune.tune import run as tune_run
from fabtune.tune.hosts import host_groups


def _ib_view(flavor: str, sm: dict[str, str] | None = None) -> View:
    return View("ib", {}, {}, sm or {"routing_engine": "minhop"}, None, 2, "PIX", sm_flavor=flavor)


def test_upstream_opensm_gets_no_adaptive_routing_move() -> None:
    routing = next(g for g in plan(_ib_view("upstream")) if g[0].group == "routing")
    assert [c.name for c in routing] == ["ftree"]
    assert all(c.change.sm.get("routing_engine") != "ar_updn" for c in routing)


def test_nvidia_sm_gets_the_adaptive_routing_move_first() -> None:
    routing = next(g for g in plan(_ib_view("mlnx")) if g[0].group == "routing")
    assert [c.name for c in routing] == ["ar_updn + adaptive routing", "ftree"]


def test_the_view_takes_the_declared_flavor_else_what_opensm_conf_shows() -> None:
    facts = {"h01": {"nics": {}, "nccl": {}, "sm": {"routing_engine": "ar_updn", "sm_flavor": "mlnx"}}}
    assert _view(facts).sm_flavor == "mlnx"
    assert _view({"h01": {"sm": {"routing_engine": "minhop"}}}).sm_flavor == "upstream"
    assert _view({"h01": {"sm": {}}}, sm_flavor="mlnx").sm_flavor == "mlnx"


def _view(facts: dict[str, Any], sm_flavor: str | None = None) -> View:
    (group,) = host_groups(facts, "ib", sm_flavor=sm_flavor)
    return group.views[0]


def _inventory(tmp_path: Path, fabric: str, sm_vars: dict[str, object]) -> Path:
    doc = {"all": {"vars": {"fabtune_fabric": fabric},
                   "hosts": {"h01": {"ansible_host": "10.0.0.1"}, "h02": {"ansible_host": "10.0.0.2"}},
                   "children": {"subnet_managers": {"hosts": {"h01": {}}, "vars": sm_vars}}}}
    path = tmp_path / "rack.yml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_the_inventory_declares_the_sm_flavor(tmp_path: Path) -> None:
    info = read_inventory(_inventory(tmp_path, "ib", {"fabtune_sm_flavor": "mlnx"}))
    assert info.sm_flavor == "mlnx"
    options, _ = tune_run.options_from(None, info)
    assert options.sm_flavor == "mlnx"  # what `fabtune tune` hands the loop
    assert read_inventory(_inventory(tmp_path, "ib", {})).sm_flavor is None
    with pytest.raises(ConfigError, match=r"fabtune_sm_flavor: 'ufm' must be one of upstream, mlnx"):
        read_inventory(_inventory(tmp_path, "ib", {"fabtune_sm_flavor": "ufm"}))
    with pytest.raises(ConfigError, match=r"fabtune_sm_flavor: 'mlnx' is for InfiniBand fabrics"):
        read_inventory(_inventory(tmp_path, "roce", {"fabtune_sm_flavor": "mlnx"}))


def test_the_testbed_inventory_declares_its_sm_flavor() -> None:
    from fabtune.testbed.files import inventory
    from fabtune.testbed.spec import build_spec

    spec = build_spec({"hosts": 2, "fabric": "ib", "sm": {"routing_engine": "minhop", "flavor": "mlnx"}})
    doc = inventory(spec, Path("/nonexistent"))
    assert doc["all"]["children"]["subnet_managers"]["vars"] == {"fabtune_sm_flavor": "mlnx"}  # type: ignore[index]
