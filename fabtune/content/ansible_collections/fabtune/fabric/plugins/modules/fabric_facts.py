#!/usr/bin/python
# Copyright: fabtune contributors
# Apache License 2.0 (see LICENSE in this collection or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: fabric_facts
short_description: Gather a GPU node's RDMA fabric state in the shape of the desired state
description:
  - RDMA ports from sysfs (C(/sys/class/infiniband)) - netdev, link layer, state, rate, firmware,
    GIDs and the RoCEv2 IPv4 GID index per port.
  - Per RoCE port the knobs the fabric roles manage (trust, DSCP map, PFC, ETS through C(mlnx_qos)
    or C(dcb); MTU, ECN per priority, CNP DSCP and priority from sysfs; rdma_cm ToS and mode from
    configfs), the NCCL settings of C(/etc/nccl.conf), the subnet manager's C(opensm.conf) keys,
    the GPU-NIC topology (C(nvidia-smi topo -m)) and the subnet manager seen by C(sminfo).
  - Where C(lldptool) is installed and C(lldpad) answers, each RoCE port's peer (the switch) as
    its DCBX TLVs say (PFC enabled priorities, willing, the APP TLV's DSCP map) in
    C(hardware.lldp); C(null) when lldpad does not run or the tool is missing.
  - The result, C(fabric_facts), has the shape of C(fabric_desired) (plus read-only C(hardware)),
    so a snapshot is just these facts given back as the desired state.
version_added: "1.0.0"
options:
  backend:
    description: QoS tool (see M(fabtune.fabric.fabric_qos)); C(auto) prefers C(mlnx_qos).
    type: str
    choices: [auto, mlnx_qos, dcb]
    default: auto
  nccl_conf:
    description: The NCCL configuration file.
    type: path
    default: /etc/nccl.conf
  opensm_conf:
    description: The subnet manager's configuration file.
    type: path
    default: /etc/opensm/opensm.conf
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
  idempotent:
    support: full
  facts:
    support: full
author:
  - fabtune contributors
"""

EXAMPLES = r"""
- name: Gather the fabric state
  fabtune.fabric.fabric_facts:

- name: Show the RoCE ToS of each port
  ansible.builtin.debug:
    msg: "{{ ansible_facts.fabric_facts.nics | dict2items | map(attribute='value.roce_tos') }}"
"""

RETURN = r"""
ansible_facts:
  description: Facts to add to ansible_facts.
  returned: always
  type: complex
  contains:
    fabric_facts:
      description: C(nics), C(nccl), C(sm) (desired-state shape) and C(hardware).
      returned: always
      type: dict
      sample:
        nics: {"enp25s0np0": {"trust": "dscp", "pfc": [3], "mtu": 4200, "roce_tos": 106}}
        nccl: {"NCCL_IB_TC": "106"}
        hardware: {"ports": [{"dev": "mlx5_0", "port": 1, "netdev": "enp25s0np0",
                              "link_layer": "Ethernet", "roce_v2_gid_index": 3}]}
"""

from pathlib import Path
from typing import Any, Callable

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.fabtune.fabric.plugins.module_utils import fabric_formats
from ansible_collections.fabtune.fabric.plugins.module_utils.fabric_desired import (
    SM_BOOL_KEYS,
    SM_INT_RANGES,
    validate,
)
from ansible_collections.fabtune.fabric.plugins.module_utils.fabric_host import (
    gids,
    netdev_split,
    parse_sminfo,
    rdma_ports,
    read_nic_sysfs,
)
from ansible_collections.fabtune.fabric.plugins.module_utils.fabric_lldp import (
    TLV_ARGS,
    LldpError,
    lldptool_argv,
    parse_peer,
)
from ansible_collections.fabtune.fabric.plugins.module_utils.fabric_qos_backend import (
    QosError,
    parse,
    read_argvs,
)

SM_FACT_KEYS = tuple(sorted(set(SM_INT_RANGES) | set(SM_BOOL_KEYS) | {
    "routing_engine", "qos_sl2vl", "qos_vlarb_high", "qos_vlarb_low", "adaptive_timeout_sl_mask"}))


def get_argument_spec() -> dict[str, Any]:
    return {
        "backend": {"type": "str", "choices": ["auto", "mlnx_qos", "dcb"], "default": "auto"},
        "nccl_conf": {"type": "path", "default": "/etc/nccl.conf"},
        "opensm_conf": {"type": "path", "default": "/etc/opensm/opensm.conf"},
    }


def parse_topo(text: str) -> dict[str, Any] | None:
    """``nvidia-smi topo -m``: ``{matrix: {row: {column: cell}}, nic_legend: {NIC0: mlx5_0}}``.

    A GPU row also names its affinity columns (``CPU Affinity``...); None for output that is not
    the matrix (``fabric_formats`` says why).
    """
    try:
        topo = fabric_formats.parse_topo(text)
    except fabric_formats.FormatError:
        return None
    affinity = {"CPU Affinity": topo.cpu_affinity, "NUMA Affinity": topo.numa_affinity,
                "GPU NUMA ID": topo.gpu_numa_id}
    matrix = {row: dict(cells, **{k: v[row] for k, v in affinity.items() if row in v})
              for row, cells in topo.cells.items()}
    return {"matrix": matrix, "nic_legend": dict(topo.nic_names)}


def sm_subset(text: str) -> dict[str, Any]:
    """The managed opensm.conf keys that have a value, in desired-state normal form."""
    raw = fabric_formats.parse_opensm_conf(text)
    chosen = {k: raw[k] for k in SM_FACT_KEYS if k in raw and raw[k] not in ("(null)", "")}
    flavor = "mlnx" if any(k.startswith("ar_") or "adaptive" in k for k in chosen) \
        or str(chosen.get("routing_engine", "")).startswith("ar_") else None
    if flavor:
        chosen["sm_flavor"] = flavor
    _problems, normal = validate({"sm": chosen}, enforce_couplings=False)
    sm: dict[str, Any] = normal.get("sm", {})
    return sm


class Gatherer:
    def __init__(self, module: AnsibleModule) -> None:
        self.module = module

    def run(self, argv: list[str]) -> str | None:
        path = self.module.get_bin_path(argv[0])
        if path is None:
            return None
        rc, out, _err = self.module.run_command([path, *argv[1:]])
        text: str | None = out if rc == 0 else None
        return text

    def backend(self) -> str | None:
        wanted: str = self.module.params["backend"]
        if wanted != "auto":
            return wanted
        for name in ("mlnx_qos", "dcb"):
            if self.module.get_bin_path(name):
                return name
        return None

    def qos(self, backend: str | None, netdev: str) -> dict[str, Any]:
        if backend is None:
            return {}
        outputs = [self.run(argv) for argv in read_argvs(backend, netdev)]
        texts = [o for o in outputs if o is not None]
        if len(texts) != len(outputs):
            self.module.warn(f"cannot read the QoS state of {netdev} with {backend}")
            return {}
        try:
            return parse(backend, texts)
        except (QosError, ValueError) as exc:
            self.module.warn(f"cannot parse the QoS state of {netdev}: {exc}")
            return {}

    def lldp(self, netdevs: list[str]) -> dict[str, Any] | None:
        """Each RoCE port's peer as lldpad received it (ports whose peer sends no PFC TLV left out);
        None when lldptool is missing or lldpad does not answer (lldptool exits non-zero)."""
        if not netdevs or self.module.get_bin_path("lldptool") is None:
            return None
        peers: dict[str, Any] = {}
        for netdev in netdevs:
            texts = [self.run(lldptool_argv(netdev, key)) for key in TLV_ARGS]
            if any(t is None for t in texts):
                return None
            try:
                peer = parse_peer("".join(t or "" for t in texts))
            except LldpError as exc:
                self.module.warn(f"cannot parse lldptool's TLVs of {netdev}: {exc}")
                continue
            if peer is not None:
                peers[netdev] = peer
        return peers

    def hardware(self, backend: str | None) -> dict[str, Any]:
        ports = []
        for item in rdma_ports("/"):
            table, v2 = gids("/", item["dev"], item["port"])
            ports.append(dict(item, gids=table, roce_v2_gid_index=v2))
        topo = self.run(["nvidia-smi", "topo", "-m"])
        sminfo = self.run(["sminfo"])
        return {
            "ports": ports,
            "qos_backend": backend,
            "topology": parse_topo(topo) if topo else None,
            "subnet_manager": parse_sminfo(sminfo) if sminfo else None,
        }

    def gather(self) -> dict[str, Any]:
        backend = self.backend()
        roce, _other = netdev_split("/")
        nics: dict[str, dict[str, Any]] = {}
        for netdev in roce:
            nic = self.qos(backend, netdev)
            nic.update(read_nic_sysfs("/", netdev))
            nics[netdev] = nic
        facts: dict[str, Any] = {"nics": nics, "hardware": self.hardware(backend)}
        facts["hardware"]["lldp"] = self.lldp(roce)
        facts["nccl"] = _read_conf(self.module.params["nccl_conf"], fabric_formats.parse_nccl_conf)
        sm_text = _read_text(self.module.params["opensm_conf"])
        if sm_text is not None:
            facts["sm"] = sm_subset(sm_text)
        return facts


def _read_text(path: str) -> str | None:
    if not Path(path).exists():
        return None
    return Path(path).read_text()


def _read_conf(path: str, parser: Callable[[str], dict[str, str]]) -> dict[str, str] | None:
    text = _read_text(path)
    return None if text is None else parser(text)


def main() -> None:
    module = AnsibleModule(argument_spec=get_argument_spec(), supports_check_mode=True)
    facts = Gatherer(module).gather()
    module.exit_json(changed=False, ansible_facts={"fabric_facts": facts})


if __name__ == "__main__":
    main()
