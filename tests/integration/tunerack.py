"""The tuning tests' rack: factory NICs behind lossless switches, and its helpers."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from fabtune.inventory import read_inventory
from fabtune.testbed import layout
from fabtune.testbed.spec import TestbedSpec
from fabtune.tune.backend import AnsibleBackend
from fabtune.tune.state import differences, snapshot_of
from tests.integration.conftest import make_testbed

FACTORY_NICS = {"trust": "pcp", "pfc": [0] * 8, "roce_tos": 0, "mtu": 1500}
FAST = {"max_runs": 6, "baseline_runs": 4, "skip_groups": ["qps", "gdr"]}
# Every NIC as the switches expect (lossless priority 3, DSCP trust, ToS 106, MTU 4200), and the
# nccl.conf that puts NCCL's traffic in that class: a tuned rack, for racks with one odd host.
TUNED_NICS = {"trust": "dscp", "pfc": [0, 0, 0, 1, 0, 0, 0, 0], "ecn_np": [0, 0, 0, 1, 0, 0, 0, 0],
              "ecn_rp": [0, 0, 0, 1, 0, 0, 0, 0], "roce_tos": 106, "mtu": 4200}
TUNED_NCCL = {"NCCL_IB_TC": 106}
State = dict[str, dict[str, object]]


def build(name: str, subnet_base: str, seed: int, lossless: int = 4) -> Iterator[TestbedSpec]:
    """Factory NICs (trust pcp, no PFC, MTU 1500, ToS 0) behind switches lossless on ``lossless``."""
    yield from make_testbed(
        {
            "name": name,
            "hosts": 2,
            "subnet_base": subnet_base,
            "nics_per_host": 2,
            "gpus_per_host": 2,
            "seed": seed,
            "initial": FACTORY_NICS,
            "switch": {"pfc_priorities": [lossless], "ecn_priorities": [lossless]},
        }
    )


def inventory(spec: TestbedSpec) -> Path:
    return layout.testbed_dir(spec.name) / "inventory.yml"


def current_state(spec: TestbedSpec) -> State:
    backend = AnsibleBackend(read_inventory(inventory(spec)))
    return {h: snapshot_of(f).tree() for h, f in backend.facts().items()}


def drift_from(expected: State, spec: TestbedSpec) -> dict[str, list[str]]:
    """Per host, every managed knob that differs from ``expected``."""
    return {h: differences(expected[h], s) for h, s in current_state(spec).items()}
