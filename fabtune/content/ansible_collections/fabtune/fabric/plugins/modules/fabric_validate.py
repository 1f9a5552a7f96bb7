#!/usr/bin/python
# Copyright: fabtune contributors
# Apache License 2.0 (see LICENSE in this collection or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: fabric_validate
short_description: Validate a desired fabric state against its couplings and this host's ports
description:
  - Checks every field of a C(fabric_desired) tree (domains of DSCP, priorities, ToS, MTU, ETS
    shares, NCCL variables, opensm keys) and the couplings between them (the RoCE ToS must land in
    the PFC priority through the DSCP map, C(NCCL_IB_TC) must equal the RoCE ToS, the CNP priority
    must not be the RoCE data priority, ...).
  - Checks that each named interface is a RoCE port of this host, and that C(NCCL_IB_HCA) selects at
    least one of its RDMA ports (a warning names each entry that matches none).
  - When the desired state sets a port's QoS (trust, DSCP map, PFC, ETS), checks that this host has
    a QoS tool that can (C(mlnx_qos), or iproute2 C(dcb) 5.12 or later, which has C(dcb app)), and
    names the tool, its version and what is needed when it has not.
  - Returns the desired NIC state expanded per RoCE netdev (C(all) merged with per-port entries).
  - Changes nothing. Fails with every problem found, each naming the field and its value.
version_added: "1.0.0"
options:
  desired:
    description: The desired fabric state (C(nics), C(nccl), C(sm)).
    type: dict
    required: true
  enforce_couplings:
    description:
      - Check the couplings between knobs.
      - Set to V(false) only to restore a snapshot exactly as it was, even an inconsistent one.
    type: bool
    default: true
  qos_backend:
    description: The QoS tool the C(fabric_qos) module will use (C(auto) as there).
    type: str
    choices: [auto, mlnx_qos, dcb]
    default: auto
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
  idempotent:
    support: full
author:
  - fabtune contributors
"""

EXAMPLES = r"""
- name: Validate the desired state before anything changes
  fabtune.fabric.fabric_validate:
    desired: "{{ fabric_desired }}"
  register: __fabric_valid
"""

RETURN = r"""
nics:
  description: Per RoCE netdev of this host, the effective desired NIC knobs.
  returned: success
  type: dict
  sample: {"enp25s0np0": {"trust": "dscp", "pfc": [3], "roce_tos": 106}}
desired:
  description: The whole desired state in normal form (C(nics) expanded per netdev).
  returned: success
  type: dict
ports:
  description: Per RoCE netdev, its RDMA device and port.
  returned: always
  type: dict
  sample: {"enp25s0np0": {"dev": "mlx5_0", "port": 1}}
roce_netdevs:
  description: The RoCE netdevs of this host.
  returned: always
  type: list
  elements: str
problems:
  description: Every problem found (empty on success).
  returned: always
  type: list
  elements: str
"""

import subprocess
from typing import Any, Mapping

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.fabtune.fabric.plugins.module_utils.fabric_desired import (
    QOS_KNOBS,
    hca_check,
    validate,
)
from ansible_collections.fabtune.fabric.plugins.module_utils.fabric_host import netdev_split, rdma_ports
from ansible_collections.fabtune.fabric.plugins.module_utils.fabric_qos_backend import (
    DCB_VERSION_ARGV,
    dcb_problem,
)

TOOL_DEADLINE_S = 10


def get_argument_spec() -> dict[str, Any]:
    return {
        "desired": {"type": "dict", "required": True},
        "enforce_couplings": {"type": "bool", "default": True},
        "qos_backend": {"type": "str", "choices": ["auto", "mlnx_qos", "dcb"], "default": "auto"},
    }


def qos_tool_problems(module: AnsibleModule, nics: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The QoS tool problems of this host when a desired NIC entry sets QoS knobs."""
    if not any(k in nic for nic in nics.values() for k in QOS_KNOBS):
        return []
    wanted: str = module.params["qos_backend"]
    names = [wanted] if wanted != "auto" else ["mlnx_qos", "dcb"]
    paths: list[tuple[str, str | None]] = [(n, module.get_bin_path(n)) for n in names]
    found = [(n, path) for n, path in paths if path]
    if not found:
        missing = "neither mlnx_qos nor dcb is" if len(names) > 1 else f"{names[0]} is not"
        return [f"QoS (trust, DSCP map, PFC, ETS): {missing} installed "
                "(install mlnx-tools or iproute2 5.12 or later)"]
    name, path = found[0]
    if name != "dcb":
        return []
    try:
        proc = subprocess.run([path, *DCB_VERSION_ARGV[1:]], capture_output=True, text=True,
                              timeout=TOOL_DEADLINE_S, check=False)
        text = proc.stdout
    except (OSError, subprocess.TimeoutExpired) as exc:
        text = f"unknown ({exc})"
    problem = dcb_problem(text)
    return [problem] if problem else []


def main() -> None:
    module = AnsibleModule(argument_spec=get_argument_spec(), supports_check_mode=True)
    roce, other = netdev_split("/")
    ports = {p["netdev"]: {"dev": p["dev"], "port": p["port"]}
             for p in rdma_ports("/") if p["netdev"] in roce}
    problems, normal = validate(module.params["desired"], roce, other, module.params["enforce_couplings"])
    hca = (normal.get("nccl") or {}).get("NCCL_IB_HCA")
    if hca is not None and module.params["enforce_couplings"]:  # a snapshot is restored as it was
        hca_problems, unmatched = hca_check(hca, [(p["dev"], p["port"]) for p in rdma_ports("/")])
        problems = problems + hca_problems
        for item in unmatched:
            module.warn(f"nccl.NCCL_IB_HCA: {item} matches no RDMA port of this host")
    if problems:
        module.fail_json(msg="invalid desired fabric state: " + "; ".join(problems),
                         problems=problems, roce_netdevs=roce, ports=ports)
    tool_problems = qos_tool_problems(module, normal.get("nics", {}))
    if tool_problems:
        module.fail_json(msg="cannot set the RoCE QoS on this host: " + "; ".join(tool_problems),
                         problems=tool_problems, roce_netdevs=roce, ports=ports)
    module.exit_json(changed=False, nics=normal.get("nics", {}), desired=normal,
                     roce_netdevs=roce, ports=ports, problems=[])


if __name__ == "__main__":
    main()
