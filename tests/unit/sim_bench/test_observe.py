"""Building the model's input from emulated state."""

from __future__ import annotations

import json
from pathlib import Path

from fabtune.sim import observe
from fabtune.sim.model import DEFAULT_GIDS
from fabtune.sim.node import NodeState


def test_environment_overrides_nccl_conf(tmp_path: Path) -> None:
    conf = tmp_path / "nccl.conf"
    conf.write_text("# comment\nNCCL_IB_GID_INDEX=0\nNCCL_IB_TC=106\nOTHER=1\n")
    env = observe.nccl_env(observe.read_nccl_conf(conf), {"NCCL_IB_GID_INDEX": "3", "PATH": "/bin"})
    assert env == (("NCCL_IB_GID_INDEX", "3"), ("NCCL_IB_TC", "106"))


def test_host_config_reads_nic_state(rack: Path) -> None:
    state = NodeState.under(rack / "h01")
    state.set_ecn("ens1np0", "np", 2, False)
    host = observe.host_config(state)
    nic = host.nics[0]
    assert (host.name, host.gpus, len(host.nics)) == ("h01", 8, 8)
    assert (nic.mtu, nic.trust, nic.pfc[3], nic.roce_mode, nic.gids) == (4200, "dscp", True, 2, DEFAULT_GIDS)
    assert nic.gpu_distance == "PIX" and not nic.ecn_np[2]


def test_sm_json_overrides_fabric_json(rack: Path) -> None:
    fabric = rack / "fabric"
    view = observe.fabric_view(fabric)
    assert view.switch.pfc[3] and view.hosts == ("h01", "h02") and view.sm.routing_engine == "minhop"
    (fabric / "sm.json").write_text(json.dumps({"routing_engine": "ar_updn", "adaptive_routing": True}))
    assert observe.fabric_view(fabric).sm.adaptive_routing


def test_json_round_trip(rack: Path) -> None:
    host = observe.host_config(NodeState.under(rack / "h02"), (("NCCL_IB_HCA", "mlx5_0"),))
    assert observe.host_from_json(json.loads(json.dumps(observe.to_json(host)))) == host
    fabric = observe.fabric_config(observe.fabric_view(rack / "fabric"), (host,))
    assert observe.fabric_from_json(observe.to_json(fabric)) == fabric
