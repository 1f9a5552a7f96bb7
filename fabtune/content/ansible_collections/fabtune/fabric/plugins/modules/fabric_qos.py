#!/usr/bin/python
# Copyright: fabtune contributors
# Apache License 2.0 (see LICENSE in this collection or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: fabric_qos
short_description: Set RoCE ports' priority trust, DSCP map, PFC and ETS through mlnx_qos or dcb
description:
  - Reads the port's QoS state with the chosen backend, compares it with the desired knobs and
    changes only what differs.
  - One port (O(interface) and the knob options), or every port of the host in one call (O(nics)),
    one module run for all of a host's ports instead of one per port.
  - Backend C(mlnx_qos) (NVIDIA mlnx-tools) or C(dcb) (iproute2 5.12 or later, upstream kernels);
    C(auto) takes C(mlnx_qos) when it is installed, else C(dcb).
  - "With C(dcb) the DSCP APP entries carry the trust state, as the mlx5 driver keeps it (the first
    DSCP entry switches the port to DSCP trust, deleting the last switches it back to PCP): trust
    C(dscp) is written as the DSCP map's entries (C(dcb app add)), trust C(pcp) by deleting them
    (C(dcb app flush)). C(dcb apptrust) is not used (iproute2 6.1 has none; mlx5 does not
    implement it)."
  - Knobs left out are not managed. C(dscp2prio) manages only the DSCPs it names.
version_added: "1.0.0"
options:
  interface:
    description:
      - The RoCE netdev whose knobs the other options give.
      - Mutually exclusive with O(nics); one of the two is required.
    type: str
  nics:
    description:
      - RoCE netdev to its desired knobs, in the C(fabric_desired.nics) shape (C(trust),
        C(dscp2prio), C(pfc), C(prio_tc), C(tsa), C(tcbw); other keys are ignored). The ports are
        set one after another, in name order.
      - Mutually exclusive with O(interface) and the knob options.
    type: dict
  backend:
    description: Tool that reads and writes the QoS state.
    type: str
    choices: [auto, mlnx_qos, dcb]
    default: auto
  trust:
    description: Priority trust state.
    type: str
    choices: [pcp, dscp]
  dscp2prio:
    description: DSCP (0..63) to priority (0..7); needs O(trust=dscp).
    type: dict
  pfc:
    description: The priorities with PFC on; every other priority gets PFC off.
    type: list
    elements: int
  prio_tc:
    description: Traffic class of each priority 0..7 (8 values).
    type: list
    elements: int
  tsa:
    description: Transmission selection algorithm of each traffic class (8 values).
    type: list
    elements: str
  tcbw:
    description: ETS bandwidth share (percent) of each traffic class (8 values, ets ones sum to 100).
    type: list
    elements: int
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
notes:
  - Under trust C(pcp) the tools do not show the DSCP map, so a desired map with trust moving to
    C(dscp) is written whole.
author:
  - fabtune contributors
"""

EXAMPLES = r"""
- name: Make priority 3 lossless for DSCP 26
  fabtune.fabric.fabric_qos:
    interface: enp25s0np0
    trust: dscp
    dscp2prio: {26: 3, 48: 6}
    pfc: [3]

- name: The same on both RoCE ports of the host, in one module run
  fabtune.fabric.fabric_qos:
    nics:
      enp25s0np0: {trust: dscp, dscp2prio: {26: 3, 48: 6}, pfc: [3]}
      enp26s0np0: {trust: dscp, dscp2prio: {26: 3, 48: 6}, pfc: [3]}
"""

RETURN = r"""
before:
  description:
    - The port's QoS state before the change (desired-state shape).
    - With O(nics), netdev to that state.
  returned: success
  type: dict
after:
  description:
    - The port's QoS state after the change (predicted in check mode).
    - With O(nics), netdev to that state.
  returned: success
  type: dict
changes:
  description:
    - One entry per changed knob (every port's, with O(nics); on a failure, those made before it).
    - With O(persist), also one per recorded knob whose value changes (C(persisted:IF.KNOB)).
  returned: success
  type: list
  elements: dict
  sample: [{"knob": "enp25s0np0.pfc", "before": [], "after": [3]}]
commands:
  description: The commands run (to be run, in check mode).
  returned: success
  type: list
  elements: list
backend:
  description: The backend used.
  returned: success
  type: str
persisted:
  description: The persisted knobs after the task (what the next boot applies), with O(persist).
  returned: when O(persist) is not empty
  type: dict
"""

from typing import Any, Mapping, Sequence

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.fabtune.fabric.plugins.module_utils.fabric_apply import (
    RevertError,
    qos_apply,
    while_armed,
)
from ansible_collections.fabtune.fabric.plugins.module_utils.fabric_desired import check_nic
from ansible_collections.fabtune.fabric.plugins.module_utils.fabric_qos_backend import QosError
from ansible_collections.fabtune.fabric.plugins.module_utils.fabric_record import (
    persist_args,
    planned,
    with_record,
)

QOS_KEYS = ("trust", "dscp2prio", "pfc", "prio_tc", "tsa", "tcbw")


def get_argument_spec() -> dict[str, Any]:
    return {
        "armed_run": {"type": "str", "default": ""},
        "interface": {"type": "str"},
        "nics": {"type": "dict"},
        "backend": {"type": "str", "choices": ["auto", "mlnx_qos", "dcb"], "default": "auto"},
        "trust": {"type": "str", "choices": ["pcp", "dscp"]},
        "dscp2prio": {"type": "dict"},
        "pfc": {"type": "list", "elements": "int"},
        "prio_tc": {"type": "list", "elements": "int"},
        "tsa": {"type": "list", "elements": "str"},
        "tcbw": {"type": "list", "elements": "int"},
        **persist_args(),
    }


def desired_from_params(params: Mapping[str, Any], where: str = "argument") -> dict[str, Any]:
    """The managed knobs in normal form (DSCP map keys as ints, PFC sorted), checked by the one NIC
    schema (``fabric_desired``: ranges, 8 values, ETS shares); raises ValueError naming each problem."""
    knobs = {key: params[key] for key in QOS_KEYS if params.get(key) is not None}
    problems, normal = check_nic(knobs, where)
    if problems:
        raise ValueError("; ".join(problems))
    return normal


def desired_by_port(params: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Netdev to its managed knobs in normal form: O(nics), or O(interface) with the knob options
    (ports without a QoS knob left out); raises ValueError naming each problem."""
    if params.get("interface"):
        return {params["interface"]: desired_from_params(params)}
    out: dict[str, dict[str, Any]] = {}
    problems: list[str] = []
    for name, knobs in sorted((params.get("nics") or {}).items()):
        if not isinstance(knobs, Mapping):
            problems.append(f"nics.{name}: must be a mapping of knobs, not {knobs!r}")
            continue
        try:
            desired = desired_from_params(knobs, f"nics.{name}")
        except ValueError as exc:
            problems.append(str(exc))
            continue
        if desired:
            out[str(name)] = desired
    if problems:
        raise ValueError("; ".join(problems))
    return out


def predict(before: Mapping[str, Any], changes: Mapping[str, tuple[Any, Any]]) -> dict[str, Any]:
    """The state after ``changes``."""
    after = dict(before)
    for key, (_old, new) in changes.items():
        if key == "dscp2prio":
            merged = dict(before.get("dscp2prio") or {})
            merged.update(new)
            after[key] = merged
        else:
            after[key] = new
    if after.get("trust") != "dscp":
        after.pop("dscp2prio", None)
    return after


def change_list(interface: str, changes: Mapping[str, tuple[Any, Any]]) -> list[dict[str, Any]]:
    return [{"knob": f"{interface}.{key}", "before": old, "after": new}
            for key, (old, new) in sorted(changes.items())]


class QosManager:
    def __init__(self, module: AnsibleModule) -> None:
        self.module = module
        self.backend = self._backend(module.params["backend"])
        self.done: list[dict[str, Any]] = []  # the changes made so far (a later port's failure reports them)

    def _backend(self, wanted: str) -> str:
        if wanted != "auto":
            if not self.module.get_bin_path(wanted):
                self.module.fail_json(msg=f"backend {wanted}: command {wanted} not found")
            return wanted
        if self.module.get_bin_path("mlnx_qos"):
            return "mlnx_qos"
        if self.module.get_bin_path("dcb"):
            return "dcb"
        self.module.fail_json(msg="neither mlnx_qos nor dcb is installed: cannot manage QoS")
        raise AssertionError("unreachable: fail_json exits the module")

    def _run(self, argv: Sequence[str]) -> str:
        argv = [self.module.get_bin_path(argv[0], required=True), *argv[1:]]
        rc, out, err = self.module.run_command(argv)
        if rc != 0:
            self.module.fail_json(msg=f"{' '.join(argv)} failed (rc {rc:d}): {(out + err).strip()[-500:]}",
                                  rc=rc, stdout=out, stderr=err, changed=bool(self.done), changes=self.done)
        text: str = out
        return text

    def apply(self, interface: str, desired: Mapping[str, Any]) -> dict[str, Any]:
        # The same read/diff/write as the host-side revert (module_utils fabric_apply); a command
        # that fails ends the module in _run. Only the parse of the read raises QosError/ValueError.
        try:
            before, changes, commands = qos_apply(self.backend, interface, desired, self._run,
                                                  check_mode=self.module.check_mode)
        except (QosError, ValueError) as exc:
            self.module.fail_json(msg=f"cannot read the QoS state of {interface}: {exc}",
                                  changed=bool(self.done), changes=self.done)
        after = predict(before, changes)
        made = change_list(interface, changes)
        if not self.module.check_mode:
            self.done.extend(made)
        result: dict[str, Any] = {"changed": bool(changes), "before": before, "after": after,
                                  "backend": self.backend, "changes": made, "commands": commands}
        if self.module._diff:
            header = f"{interface} qos"
            result["diff"] = {"before": _text(before), "after": _text(after),
                              "before_header": header, "after_header": header}
        return result

    def apply_ports(self, desired: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
        """Every port of O(nics), one after another: one result with every port's changes."""
        ports = {name: self.apply(name, knobs) for name, knobs in desired.items()}
        result: dict[str, Any] = {
            "changed": any(r["changed"] for r in ports.values()), "backend": self.backend,
            "before": {n: r["before"] for n, r in ports.items()},
            "after": {n: r["after"] for n, r in ports.items()},
            "changes": [c for r in ports.values() for c in r["changes"]],
            "commands": [c for r in ports.values() for c in r["commands"]],
        }
        if self.module._diff:
            result["diff"] = [r["diff"] for r in ports.values()]
        return result


def _text(state: Mapping[str, Any]) -> str:
    lines = []
    for key in sorted(state):
        value = state[key]
        if key == "dscp2prio":
            value = ",".join(f"{d}:{p}" for d, p in sorted(value.items()))
        lines.append(f"{key}: {value}")
    return "\n".join(lines) + "\n"


def main() -> None:
    module = AnsibleModule(argument_spec=get_argument_spec(), supports_check_mode=True,
                           required_one_of=[("interface", "nics")],
                           mutually_exclusive=[("interface", "nics"), *(("nics", k) for k in QOS_KEYS)])
    try:
        desired = desired_by_port(module.params)
    except ValueError as exc:
        module.fail_json(msg=str(exc))
    record = planned(module, module.params["nics"] if module.params["nics"] is not None else desired,
                     "nics" if module.params["nics"] is not None else "interface")
    manager = QosManager(module)
    try:
        with while_armed("" if module.check_mode else module.params["armed_run"]):
            if module.params["interface"]:
                result = manager.apply(module.params["interface"], desired[module.params["interface"]])
            else:
                result = manager.apply_ports(desired)
            if record is not None and not module.check_mode:
                record.write()
    except RevertError as exc:
        module.fail_json(msg=str(exc), reverted=exc.reverted, changed=False)
    except OSError as exc:
        module.fail_json(msg=f"cannot write {module.params['persist_path']}: {exc}",
                         changed=bool(manager.done), changes=manager.done)
    module.exit_json(**(with_record(result, record, module._diff) if record is not None else result))


if __name__ == "__main__":
    main()
