#!/usr/bin/python
# Copyright: fabtune contributors
# Apache License 2.0 (see LICENSE in this collection or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: fabric_sysfs
short_description: Set a group of sysfs and configfs knobs (ECN, CNP, rdma_cm ToS and mode, MTU)
description:
  - Reads each knob file, writes only those whose value differs, and reads them back.
  - Values compare as stripped text, so C(1) matches a file that reads C(1\\n).
  - Paths must be under C(/sys/) (sysfs, configfs, debugfs).
  - For rdma_cm knobs (C(/sys/kernel/config/rdma_cm/DEV/...)) the device's configfs group is
    created with mkdir when missing, as the kernel interface wants (mlnx-tools C(cma_roce_tos) does
    the same); configfs must be mounted.
version_added: "1.0.0"
options:
  knobs:
    description:
      - Path to desired value.
      - Mutually exclusive with O(interface) and O(nic).
    type: dict
  interface:
    description: A RoCE netdev whose knobs O(nic) gives (the paths are derived, as on an mlx5 host).
    type: str
  nic:
    description:
      - Desired NIC knobs in the C(fabric_desired.nics) shape. Taken here are C(mtu)
        (C(/sys/class/net/IF/mtu)), C(ecn) (C({np, rp}) lists of priorities with ECN on,
        C(.../ecn/roce_{np,rp}/enable/P)), C(cnp_dscp), C(cnp_prio) (C(.../ecn/roce_np/cnp_802p_prio)),
        C(roce_tos) and C(roce_mode) (rdma_cm configfs of the netdev's RDMA port); other keys are ignored.
    type: dict
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
  idempotent:
    support: full
author:
  - fabtune contributors
"""

EXAMPLES = r"""
- name: Enable ECN on priority 3 and send CNPs with DSCP 48
  fabtune.fabric.fabric_sysfs:
    knobs:
      /sys/class/net/enp25s0np0/ecn/roce_np/enable/3: "1"
      /sys/class/net/enp25s0np0/ecn/roce_np/cnp_dscp: "48"

- name: ECN on priority 3 only, CNPs on DSCP 48 / priority 6, rdma_cm ToS 106
  fabtune.fabric.fabric_sysfs:
    interface: enp25s0np0
    nic: {ecn: {np: [3], rp: [3]}, cnp_dscp: 48, cnp_prio: 6, roce_tos: 106}
"""

RETURN = r"""
before:
  description: Path to value before (null when the file did not exist yet).
  returned: success
  type: dict
after:
  description: Path to value after (desired values in check mode).
  returned: success
  type: dict
paths_changed:
  description: The files written (to be written, in check mode).
  returned: success
  type: list
  elements: str
changes:
  description: One entry per changed knob (with O(nic), per desired-state knob, e.g. C(IF.ecn)).
  returned: success
  type: list
  elements: dict
  sample: [{"knob": "enp25s0np0.cnp_dscp", "path": "/sys/class/net/enp25s0np0/ecn/roce_np/cnp_dscp",
            "before": "46", "after": "48"}]
"""

from typing import Any, Mapping

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.fabtune.fabric.plugins.module_utils.fabric_apply import (
    ApplyError,
    nic_knobs,
    plan,
    write_changes,
)
from ansible_collections.fabtune.fabric.plugins.module_utils.fabric_host import read_nic_sysfs


def get_argument_spec() -> dict[str, Any]:
    return {
        "knobs": {"type": "dict"},
        "interface": {"type": "str"},
        "nic": {"type": "dict"},
    }


NIC_KEYS = ("mtu", "ecn", "cnp_dscp", "cnp_prio", "roce_tos", "roce_mode")


def nic_changes(interface: str, before_state: Mapping[str, Any],
                nic: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Per desired-state knob of ``nic`` that differs, ``{knob, before, after}``."""
    out: list[dict[str, Any]] = []
    for key in NIC_KEYS:
        if key not in nic:
            continue
        want, have = nic[key], before_state.get(key)
        if key == "ecn":
            want = {p: sorted(v) for p, v in want.items()}
            have = {p: v for p, v in (have or {}).items() if p in want} or None
        if have != want:
            out.append({"knob": f"{interface}.{key}", "before": have, "after": want})
    return out


def bad_paths(knobs: Mapping[str, object]) -> list[str]:
    """Paths that are not absolute sysfs paths (or that climb out with ``..``)."""
    return [p for p in knobs if not p.startswith("/sys/") or ".." in p.split("/")]


def main() -> None:
    module = AnsibleModule(argument_spec=get_argument_spec(), supports_check_mode=True,
                           required_one_of=[("knobs", "interface")],
                           mutually_exclusive=[("knobs", "interface")],
                           required_together=[("interface", "nic")])
    interface, nic = module.params["interface"], module.params["nic"]
    before_state = None
    knobs: Mapping[str, object]
    if interface:
        nic = {k: v for k, v in nic.items() if k in NIC_KEYS and v is not None}
        knobs, problem = nic_knobs("/", interface, nic)
        if problem:
            module.fail_json(msg=problem)
        before_state = read_nic_sysfs("/", interface)
    else:
        knobs = module.params["knobs"]
    bad = bad_paths(knobs)
    if bad:
        module.fail_json(msg=f"argument 'knobs' must name paths under /sys/, not {', '.join(sorted(bad))}")
    before, changes = plan(knobs)
    if changes and not module.check_mode:
        try:
            write_changes(changes)  # the same code the host-side revert runs (module_utils fabric_apply)
        except ApplyError as exc:
            module.fail_json(msg=str(exc), before=before)
    after: dict[str, str | None] = dict(before)
    after.update({p: new for p, (_old, new) in changes.items()})
    if before_state is not None:
        knob_changes = nic_changes(interface, before_state, nic) if changes else []
    else:
        knob_changes = [{"knob": p, "before": old, "after": new} for p, (old, new) in sorted(changes.items())]
    result: dict[str, Any] = {"changed": bool(changes), "before": before, "after": after,
                              "changes": knob_changes, "paths_changed": sorted(changes)}
    if module._diff:
        result["diff"] = {
            "before": "".join(f"{p} = {before[p]}\n" for p in sorted(changes)),
            "after": "".join(f"{p} = {changes[p][1]}\n" for p in sorted(changes)),
        }
    module.exit_json(**result)


if __name__ == "__main__":
    main()
