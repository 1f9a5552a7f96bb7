#!/usr/bin/python
# Copyright: fabtune contributors
# Apache License 2.0 (see LICENSE in this collection or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: fabric_persist
short_description: Record the NIC knobs a role set, for fabtune-boot to re-apply at boot
description:
  - 'The NIC knobs (trust, DSCP map, PFC, ETS, MTU, ECN, CNP, rdma_cm ToS and mode) live in the
    kernel and the NIC and are back at their defaults after a reboot or a driver reload. Each role
    that sets them records them with this module in O(path) (C({"nics": {netdev: {knob: value}}}),
    mode 0644), and C(fabtune-boot.service) (role C(fabric_boot)) applies that file at boot with the
    same code as the host-side revert (module_utils C(fabric_apply)).'
  - The given knobs are merged over what the file holds (a knob left out keeps its recorded value,
    as it keeps its value on the host; C(dscp2prio) and C(ecn) merge per key).
  - "O(nics) is validated against this host's RoCE ports (couplings not enforced: a role records
    its own knobs); C(nics.all) is expanded to every RoCE port."
  - The file is one of those an armed revert (M(fabtune.fabric.fabric_revert)) saves and puts back,
    so a move that is not confirmed is not re-applied at the next boot.
version_added: "1.0.0"
options:
  nics:
    description: NIC knobs in the C(fabric_desired.nics) shape (C(all) or netdev names as keys).
    type: dict
    required: true
  knobs:
    description: The knobs of O(nics) to record (the calling role's own); others are ignored. All when
      omitted.
    type: list
    elements: str
  path:
    description: The file of persisted knobs.
    type: path
    default: /etc/fabtune/persisted.json
extends_documentation_fragment:
  - fabtune.fabric.armed_run
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
- name: Keep PFC on priority 3 and MTU 4200 across reboots
  fabtune.fabric.fabric_persist:
    nics:
      enp25s0np0: {pfc: [3], mtu: 4200}

- name: Record only this role's knobs of the validated desired state
  fabtune.fabric.fabric_persist:
    nics: "{{ __valid.nics }}"
    knobs: [ecn, cnp_dscp, cnp_prio]
"""

RETURN = r"""
changes:
  description: One entry per persisted knob whose recorded value changes (knob C(persisted:IF.KNOB)).
  returned: success
  type: list
  elements: dict
  sample: [{"knob": "persisted:enp25s0np0.pfc", "before": null, "after": [3]}]
path:
  description: The file.
  returned: always
  type: str
nics:
  description: The persisted knobs after the task (what the next boot applies).
  returned: success
  type: dict
"""

from typing import Any

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.fabtune.fabric.plugins.module_utils.fabric_apply import (
    PERSISTED,
    RevertError,
    while_armed,
)
from ansible_collections.fabtune.fabric.plugins.module_utils.fabric_record import RecordError, plan_record


def get_argument_spec() -> dict[str, Any]:
    return {
        "armed_run": {"type": "str", "default": ""},
        "nics": {"type": "dict", "required": True},
        "knobs": {"type": "list", "elements": "str"},
        "path": {"type": "path", "default": PERSISTED},
    }


def main() -> None:
    module = AnsibleModule(argument_spec=get_argument_spec(), supports_check_mode=True)
    path = module.params["path"]
    try:
        record = plan_record(module.params["nics"], module.params["knobs"], path)
    except RecordError as exc:
        module.fail_json(msg=exc.message(), problems=exc.problems, path=path)
    if record.changed and not module.check_mode:
        try:
            with while_armed(module.params["armed_run"]):
                record.write()
        except RevertError as exc:
            module.fail_json(msg=str(exc), reverted=exc.reverted, path=path)
        except OSError as exc:
            module.fail_json(msg=f"cannot write {path}: {exc}", path=path)
    result: dict[str, Any] = {"changed": record.changed, "path": path, "nics": record.nics,
                              "changes": record.changes}
    if module._diff:
        result["diff"] = record.diff()
    module.exit_json(**result)


if __name__ == "__main__":
    main()
