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
      - Mutually exclusive with O(interface), O(nic) and O(nics).
    type: dict
  interface:
    description: A RoCE netdev whose knobs O(nic) gives (the paths are derived, as on an mlx5 host).
    type: str
  nics:
    description:
      - Netdev to its desired knobs, in the shape of O(nic), every RoCE port of the host in one
        module run instead of one run per port.
      - Mutually exclusive with O(knobs), O(interface) and O(nic).
    type: dict
  only:
    description:
      - The knobs of O(nic) or O(nics) managed here (for example C([mtu])); the others are ignored.
      - Default is every knob this module takes.
    type: list
    elements: str
    choices: [mtu, ecn, cnp_dscp, cnp_prio, roce_tos, roce_mode]
  nic:
    description:
      - Desired NIC knobs in the C(fabric_desired.nics) shape. Taken here are C(mtu)
        (C(/sys/class/net/IF/mtu)), C(ecn) (C({np, rp}) lists of priorities with ECN on,
        C(.../ecn/roce_{np,rp}/enable/P)), C(cnp_dscp), C(cnp_prio) (C(.../ecn/roce_np/cnp_802p_prio)),
        C(roce_tos) and C(roce_mode) (rdma_cm configfs of the netdev's RDMA port); other keys are ignored.
    type: dict
extends_documentation_fragment:
  - fabtune.fabric.armed_run
  - fabtune.fabric.persist
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

- name: The MTU of both RoCE ports in one module run (their other knobs left alone)
  fabtune.fabric.fabric_sysfs:
    nics:
      enp25s0np0: {mtu: 4200, roce_tos: 106}
      enp26s0np0: {mtu: 4200, roce_tos: 106}
    only: [mtu]

- name: Set ECN and CNP on every RoCE port and record them for fabtune-boot, in one module run
  fabtune.fabric.fabric_sysfs:
    nics: "{{ validated.nics }}"
    only: [ecn, cnp_dscp, cnp_prio]
    persist: [ecn, cnp_dscp, cnp_prio]
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
persisted:
  description: The persisted knobs after the task (what the next boot applies), with O(persist).
  returned: when O(persist) is not empty
  type: dict
changes:
  description:
    - One entry per changed knob (with O(nic) or O(nics), per desired-state knob, e.g. C(IF.ecn)).
    - With O(persist), also one per recorded knob whose value changes (C(persisted:IF.KNOB)).
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
    Changes,
    RevertError,
    nic_knobs,
    plan,
    while_armed,
    write_changes,
)
from ansible_collections.fabtune.fabric.plugins.module_utils.fabric_host import read_nic_sysfs
from ansible_collections.fabtune.fabric.plugins.module_utils.fabric_record import (
    Record,
    persist_args,
    planned,
    with_record,
)


def get_argument_spec() -> dict[str, Any]:
    return {
        "armed_run": {"type": "str", "default": ""},
        "knobs": {"type": "dict"},
        "interface": {"type": "str"},
        "nic": {"type": "dict"},
        "nics": {"type": "dict"},
        "only": {"type": "list", "elements": "str", "choices": list(NIC_KEYS)},
        **persist_args(),
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


def desired_ports(params: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Netdev to the knobs managed on it: O(interface) with O(nic), or O(nics); each narrowed to
    O(only) (ports left with none are left out of O(nics))."""
    taken = [k for k in NIC_KEYS if k in (params.get("only") or NIC_KEYS)]
    if params.get("interface"):
        ports = {params["interface"]: params.get("nic") or {}}
    else:
        ports = params.get("nics") or {}
    out: dict[str, dict[str, Any]] = {}
    for name, nic in sorted(ports.items()):
        if not valid_netdev(str(name)):
            raise ValueError(f"{'interface' if params.get('interface') else 'nics'}: {name!r} is not a "
                             "netdev name (1 to 15 characters, no '/', ':' or white space, not . or ..)")
        if not isinstance(nic, Mapping):
            raise ValueError(f"nics.{name}: must be a mapping of knobs, not {nic!r}")
        knobs = {k: nic[k] for k in taken if nic.get(k) is not None}
        if knobs or params.get("interface"):
            out[str(name)] = knobs
    return out


def valid_netdev(name: str) -> bool:
    """A name the kernel takes for a netdev (``dev_valid_name``): it becomes a /sys/class/net path."""
    return 0 < len(name) < 16 and name not in (".", "..") and not any(c in "/:" or c.isspace() for c in name)


def port_knobs(ports: Mapping[str, Mapping[str, Any]]) -> tuple[dict[str, dict[str, str]], str | None]:
    """Netdev to the ``{path: value}`` its knobs ask for, or the first problem."""
    out: dict[str, dict[str, str]] = {}
    for name, nic in ports.items():
        knobs, problem = nic_knobs("/", name, nic)
        if problem:
            return out, problem
        out[name] = knobs
    return out, None


def bad_paths(knobs: Mapping[str, object]) -> list[str]:
    """Paths that are not absolute sysfs paths (or that climb out with ``..``)."""
    return [p for p in knobs if not p.startswith("/sys/") or ".." in p.split("/")]


def planned_record(module: AnsibleModule) -> Record | None:
    """The record O(persist) asks for, of O(nics) or of O(interface)'s O(nic) (not of O(knobs))."""
    params = module.params
    if params["persist"] and params["knobs"] is not None:
        module.fail_json(msg="argument 'persist' needs 'nics' or 'interface' with 'nic' (not 'knobs')")
    if params["nics"] is not None:
        return planned(module, params["nics"], "nics")
    return planned(module, {params["interface"]: params["nic"] or {}}, "nic")


def write_all(module: AnsibleModule, changes: Changes, record: Record | None,
              before: Mapping[str, Any]) -> None:
    """The knob writes, then the record, while the run is armed (nothing in check mode)."""
    if module.check_mode or not (changes or (record and record.changed)):
        return
    try:
        with while_armed(module.params["armed_run"]):
            write_changes(changes)  # the same code the host-side revert runs (module_utils fabric_apply)
            if record is not None:
                record.write()
    except RevertError as exc:
        module.fail_json(msg=str(exc), reverted=exc.reverted, before=before)
    except ApplyError as exc:
        module.fail_json(msg=str(exc), before=before)
    except OSError as exc:
        module.fail_json(msg=f"cannot write {module.params['persist_path']}: {exc}", before=before,
                         changed=bool(changes))


def main() -> None:
    module = AnsibleModule(argument_spec=get_argument_spec(), supports_check_mode=True,
                           required_one_of=[("knobs", "interface", "nics")],
                           mutually_exclusive=[("knobs", "interface", "nics"), ("nic", "nics"),
                                               ("knobs", "only")],
                           required_together=[("interface", "nic")])
    by_port: dict[str, dict[str, str]] = {}
    ports: dict[str, dict[str, Any]] = {}
    knobs: Mapping[str, object]
    if module.params["knobs"] is None:
        try:
            ports = desired_ports(module.params)
        except ValueError as exc:
            module.fail_json(msg=str(exc))
        by_port, problem = port_knobs(ports)
        if problem:
            module.fail_json(msg=problem)
        knobs = {path: value for port in by_port.values() for path, value in port.items()}
    else:
        knobs = module.params["knobs"]
    bad = bad_paths(knobs)
    if bad:
        module.fail_json(msg=f"argument 'knobs' must name paths under /sys/, not {', '.join(sorted(bad))}")
    record = planned_record(module)
    before_state = {name: read_nic_sysfs("/", name) for name in ports}
    before, changes = plan(knobs)
    write_all(module, changes, record, before)
    after: dict[str, str | None] = dict(before)
    after.update({p: new for p, (_old, new) in changes.items()})
    if module.params["knobs"] is None:
        knob_changes = [change for name, nic in ports.items() if changes.keys() & by_port[name].keys()
                        for change in nic_changes(name, before_state[name], nic)]
    else:
        knob_changes = [{"knob": p, "before": old, "after": new} for p, (old, new) in sorted(changes.items())]
    result: dict[str, Any] = {"changed": bool(changes), "before": before, "after": after,
                              "changes": knob_changes, "paths_changed": sorted(changes)}
    if module._diff:
        result["diff"] = {
            "before": "".join(f"{p} = {before[p]}\n" for p in sorted(changes)),
            "after": "".join(f"{p} = {changes[p][1]}\n" for p in sorted(changes)),
        }
    if record is not None:
        result = with_record(result, record, module._diff)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
