"""Two hosts, neither the first, each misconfigured its own way: h02 trusts PCP (its DSCP-marked RoCE
lands in priority 0, lossy), h03's nccl.conf turns GPUDirect RDMA off (NCCL_NET_GDR_LEVEL=LOC under
a NIC on the GPUs' PCIe switch). One ``fabtune tune`` brings the rack to the oracle's best with the
lossless move on h02 alone and the GDR move on h03 alone; h01 is never changed.

(One faulty host per fault, for every fault the model knows, in tests/unit/test_tune_one_bad_host.py.)
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from fabtune.journal import Journal
from fabtune.testbed import oracle as testbed_model
from fabtune.testbed.spec import TestbedSpec
from fabtune.tune import run as tune_run
from fabtune.tune.state import differences
from tests.integration.conftest import make_testbed
from tests.integration.tunerack import TUNED_NCCL, TUNED_NICS, current_state, inventory

pytestmark = pytest.mark.testbed

TUNED, NCCL = TUNED_NICS, TUNED_NCCL  # every host tuned but the odd ones (the overrides below)


@pytest.fixture(scope="module")
def rack() -> Iterator[TestbedSpec]:
    yield from make_testbed({
        "name": "fahost",
        "fabric": "roce",
        "hosts": 3,
        "subnet_base": "10.217",
        # a NIC beside each GPU (PIX): with one NIC for two GPUs, the second GPU sits a PCIe host
        # bridge away, and GPUDirect RDMA up to PHB is then the whole rack's best (the oracle's too)
        "nics_per_host": 2,
        "gpus_per_host": 2,
        "seed": 11,
        "initial": TUNED,
        "switch": {"pfc_priorities": [3], "ecn_priorities": [3], "trust": "dscp"},
        "overrides": {"h01": {"nccl_conf": NCCL},
                      "h02": {"nccl_conf": NCCL, "initial": {"trust": "pcp"}},
                      "h03": {"nccl_conf": {**NCCL, "NCCL_NET_GDR_LEVEL": "LOC"}}},
    })


@pytest.mark.timeout(1500)  # a whole tune on the testbed: minutes, more on a loaded machine
def test_each_bad_host_is_tuned_by_moves_on_it_alone(rack: TestbedSpec) -> None:
    before = current_state(rack)
    options = {"max_runs": 6, "baseline_runs": 4, "skip_groups": ["qps"], "pair_matrix": "off"}
    result, report = tune_run.tune(inventory(rack), options, oracle=testbed_model.testbed_oracle)
    moves = [(m.name, m.outcome, m.hosts) for m in result.moves]
    assert moves == [("lossless priority 3", "kept", ["h02"]), ("GPUDirect RDMA up to PXB", "kept", ["h03"])]
    assert json.loads(report.read_text())["oracle"]["share_of_best"] >= 0.99, moves
    after = current_state(rack)
    assert differences(before["h01"], after["h01"]) == []  # h01 was never changed
    assert differences(after["h01"], after["h02"]) == []  # h02 ends where h01 was
    changed = differences(before["h03"], after["h03"])
    assert len(changed) == 1 and "NCCL_NET_GDR_LEVEL" in changed[0], changed  # h03: its GDR level alone
    steps = [s for s in Journal().steps(result.run_id) if s.kind == "move"]
    assert [s.payload["hosts"] for s in steps] == [["h02"], ["h03"]]
