"""The fabric model's oracle for a testbed, read from the controller.

:func:`controller_fabric` reads every host of a testbed (``hosts/H/`` with the overlay upper for
``/etc/nccl.conf`` and ``ip -n NETNS`` for kernel attributes) into one ``FabricConfig``;
:func:`testbed_oracle` asks the model for the best all_reduce bus bandwidth reachable on that rack
and what its current settings give. The emulator's plugin (``fabtune.testbed.plugin``) hands it to
``fabtune tune``; ``fabtune demo``, ``bench/`` and the tests pass it to ``tune.run.tune`` themselves.
"""

from __future__ import annotations

from typing import Any

from fabtune.inventory import InventoryInfo
from fabtune.sim.model import best_config, expected_busbw
from fabtune.sim.model.config import FabricConfig
from fabtune.sim.observe import controller_host, fabric_config, fabric_view, scaled_job
from fabtune.testbed.build import load_state
from fabtune.testbed.layout import Names, testbed_dir
from fabtune.testbed.spec import is_testbed_name

ORACLE_SIZE = 8 << 30  # bytes: the all_reduce size the oracle is computed at (bandwidth-bound)


def controller_fabric(name: str) -> FabricConfig:
    """Every host of testbed ``name`` as one ``FabricConfig`` (what its benchmarks would see now)."""
    tb_dir = testbed_dir(name)
    view = fabric_view(tb_dir / "fabric")
    names = Names(name)
    hosts = tuple(controller_host(tb_dir / "hosts" / h, names.netns(h)) for h in view.hosts)
    return fabric_config(view, scaled_job(hosts, view.job_nodes))


def testbed_oracle(info: InventoryInfo) -> dict[str, Any] | None:
    """On a testbed, the model's best reachable all_reduce busbw and the tuned rack's, noise-free;
    None for a fabric that is no testbed up here."""
    if not is_testbed_name(info.name) or load_state(info.name) is None:
        return None
    fabric = controller_fabric(info.name)
    _, best = best_config(fabric, "all_reduce", ORACLE_SIZE)
    now = expected_busbw(fabric, "all_reduce", ORACLE_SIZE)
    return {
        "best_busbw": best,
        "tuned_busbw": now,
        "share_of_best": now / best if best else None,
        "size_bytes": ORACLE_SIZE,
    }
