#!/usr/bin/python
# Copyright: fabtune contributors
# Apache License 2.0 (see LICENSE in this collection or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: fabric_revert
short_description: Arm or confirm a host-side revert of a fabric change (commit-confirmed)
description:
  - O(state=armed) saves a snapshot (a C(fabric_desired) tree, typically the C(fabric_facts) taken
    before the change) to C(/var/lib/fabtune/revert/RUN_ID.json) (mode 0600) with the managed
    files' current bytes (C(/etc/nccl.conf), C(/etc/fabtune/rdma_cm.conf), C(/etc/opensm/opensm.conf),
    and C(/etc/fabtune/persisted.json), what C(fabtune-boot) re-applies at boot), and arms a transient
    systemd timer C(fabtune-revert-RUN_ID.timer) that runs C(/usr/local/sbin/fabtune-revert RUN_ID)
    after O(deadline_s) seconds. That script (role C(fabric_revert)) applies the snapshot locally
    with the same code as the fabric modules, unless the change was confirmed first.
  - Arming again replaces the timer (it is stopped first) and the saved snapshot.
  - The first arming of a run also saves its snapshot as C(RUN_ID.prerun.json) (mode 0600), never
    replaced by later armings and kept after confirmation. It is the host's state before the run, from
    which C(fabtune rollback RUN --from-hosts) restores a run whose journal is lost. The last 10
    runs' records are kept.
  - A reboot ends the transient timer; C(fabtune-boot.service) (role C(fabric_boot)) then reverts
    every run still armed at boot, before it applies the persisted settings.
  - O(state=confirmed) (or V(absent)) stops the timer and removes the saved snapshot. It fails when
    the host has already reverted the run (the change is gone; the controller must know).
  - O(state=extended) moves the deadline of a run still armed to O(deadline_s) from now (the saved
    snapshot is kept; O(snapshot) is not needed). The apply playbook extends it when the apply is
    done, and the controller before each batch of measurements, so the deadline counts from the
    controller's last sign of life, not from the start of the move. It fails, as confirming does,
    when the host has already reverted the run, and when the run is not armed on the host.
    C(fabtune-revert --extend RUN_ID DEADLINE_S) runs the same code (fabtune's tuning loop calls it
    over SSH instead of a playbook run).
  - The snapshot is validated against this host's ports (couplings not enforced) before anything
    is armed; a revert that could not apply is refused up front.
version_added: "1.0.0"
options:
  run_id:
    description: The run (or move) the revert belongs to; letters, digits, C(_), C(.), C(-).
    type: str
    required: true
  state:
    description:
      - V(armed) arms (or re-arms) the revert; V(extended) moves the deadline of an armed run;
        V(confirmed) or V(absent) cancels it.
    type: str
    choices: [armed, extended, confirmed, absent]
    default: armed
  snapshot:
    description:
      - The state to go back to (C(nics), C(nccl); C(hardware) and C(sm) are ignored by the host-side
        revert). Required with O(state=armed).
    type: dict
  deadline_s:
    description: Seconds until the revert fires unless confirmed (at least 10).
    type: int
    default: 300
  state_dir:
    description: Where saved snapshots live.
    type: path
    default: /var/lib/fabtune/revert
  script:
    description: The revert command the timer runs (installed by the C(fabric_revert) role).
    type: path
    default: /usr/local/sbin/fabtune-revert
attributes:
  check_mode:
    support: full
    details: In check mode nothing is armed, written, stopped or removed; the result says what would be.
  diff_mode:
    support: none
  idempotent:
    support: partial
    details: Arming always re-arms (a new deadline), so it always reports a change; confirming is idempotent.
requirements:
  - systemd (C(systemd-run), C(systemctl)) on the host
author:
  - fabtune contributors
"""

EXAMPLES = r"""
- name: Arm a revert to the snapshot, 120 s from now
  fabtune.fabric.fabric_revert:
    run_id: "20240601-move3"
    snapshot: "{{ fabric_facts }}"
    deadline_s: 120

- name: Keep the change (cancel the revert)
  fabtune.fabric.fabric_revert:
    run_id: "20240601-move3"
    state: confirmed
"""

RETURN = r"""
armed:
  description: Whether a revert is armed for the run after the task (false in check mode).
  returned: always
  type: bool
deadline:
  description: When the revert fires (epoch seconds); null when not armed.
  returned: always
  type: float
unit:
  description: The transient timer unit.
  returned: always
  type: str
  sample: fabtune-revert-20240601-move3.timer
path:
  description: The saved snapshot.
  returned: always
  type: str
prerun:
  description: Whether this arming saved the run's pre-run record (its first arming).
  returned: when state is armed
  type: bool
reverted:
  description: The host already reverted this run (O(state=confirmed) fails then).
  returned: when state is confirmed or extended
  type: bool
"""

import json
import os
import time
from pathlib import Path
from typing import Any, Sequence

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.fabtune.fabric.plugins.module_utils.fabric_apply import (
    MIN_DEADLINE_S,
    RUN_ID_RE,
    RevertError,
    arm_argv,
    check_not_reverted,
    confirm_armed,
    extend_armed,
    keep_prerun,
    kept_files,
    locked,
    record_path,
    stop_timer,
    unit_name,
    write_record,
)
from ansible_collections.fabtune.fabric.plugins.module_utils.fabric_desired import validate
from ansible_collections.fabtune.fabric.plugins.module_utils.fabric_host import netdev_split


def get_argument_spec() -> dict[str, Any]:
    return {
        "run_id": {"type": "str", "required": True},
        "state": {"type": "str", "choices": ["armed", "extended", "confirmed", "absent"], "default": "armed"},
        "snapshot": {"type": "dict"},
        "deadline_s": {"type": "int", "default": 300},
        "state_dir": {"type": "path", "default": "/var/lib/fabtune/revert"},
        "script": {"type": "path", "default": "/usr/local/sbin/fabtune-revert"},
    }


class Revert:
    def __init__(self, module: AnsibleModule) -> None:
        self.module = module
        self.run_id: str = module.params["run_id"]
        self.state_dir: str = module.params["state_dir"]
        self.unit = unit_name(self.run_id)
        self.timer = self.unit + ".timer"
        self.path = record_path(self.state_dir, self.run_id)

    def result(self, **kwargs: Any) -> dict[str, Any]:
        return dict({"unit": self.timer, "path": self.path, "armed": False, "deadline": None}, **kwargs)

    def execute(self, argv: Sequence[str]) -> tuple[int, str, str]:
        rc, out, err = self.module.run_command(list(argv))
        return rc, out, err

    def systemctl(self, *args: str) -> tuple[int, str, str]:
        return self.execute([self.module.get_bin_path("systemctl", required=True), *args])

    def active(self) -> bool:
        rc, out, _err = self.systemctl("is-active", self.timer)
        return rc == 0 and out.strip() in ("active", "activating")

    def stop(self) -> None:
        """Stop the timer; not loaded (rc 5) is fine."""
        try:
            stop_timer(self.execute, self.module.get_bin_path("systemctl", required=True), self.run_id)
        except RevertError as exc:
            self.module.fail_json(msg=str(exc), **self.result())

    def _deadline_checked(self, deadline_s: int) -> None:
        if deadline_s < MIN_DEADLINE_S:
            self.module.fail_json(msg=f"argument 'deadline_s' must be at least {MIN_DEADLINE_S:d} seconds, "
                                  f"not {deadline_s:d}", **self.result())

    def arm(self) -> dict[str, Any]:
        params = self.module.params
        if params["snapshot"] is None:
            self.module.fail_json(msg="state=armed needs a snapshot", **self.result())
        self._deadline_checked(params["deadline_s"])
        roce, other = netdev_split("/")
        problems, _normal = validate(params["snapshot"], roce, other, enforce_couplings=False)
        if problems:
            self.module.fail_json(msg="the snapshot cannot be applied on this host: " + "; ".join(problems),
                                  problems=problems, **self.result())
        systemd_run = self.module.get_bin_path("systemd-run")
        if systemd_run is None:
            self.module.fail_json(msg="systemd-run not found: cannot arm a revert timer", **self.result())
        argv = arm_argv(systemd_run, self.run_id, params["deadline_s"], params["script"])
        if self.module.check_mode:
            return self.result(changed=True, commands=[argv],
                               msg=f"check mode: would arm {self.timer} for {params['deadline_s']:d} s")
        if not os.access(params["script"], os.X_OK):
            self.module.fail_json(msg=f"{params['script']} is not installed (role fabric_revert installs it)",
                                  **self.result())
        with locked(self.state_dir):
            self.stop()
            for kind in ("reverted", "failed"):
                stale = Path(record_path(self.state_dir, self.run_id, kind))
                if stale.exists():
                    stale.unlink()
            deadline = time.time() + params["deadline_s"]
            record = {
                "run_id": self.run_id, "unit": self.timer, "armed_at": time.time(),
                "deadline": deadline, "deadline_s": params["deadline_s"],
                "snapshot": params["snapshot"], "files": kept_files("/"), "script": params["script"],
            }
            write_record(self.state_dir, self.run_id, record)
            prerun = keep_prerun(self.state_dir, self.run_id, record)
            rc, out, err = self.module.run_command(argv)
            if rc != 0:
                Path(self.path).unlink()
                self.module.fail_json(msg=f"cannot arm the revert timer (rc {rc:d}): {(out + err).strip()}",
                                      rc=rc, stdout=out, stderr=err, **self.result())
        return self.result(changed=True, armed=True, deadline=deadline, commands=[argv], prerun=prerun)

    def gone(self) -> None:
        """Fail when the host already reverted the run (its record renamed by the revert)."""
        try:
            check_not_reverted(self.state_dir, self.run_id)
        except RevertError as exc:
            self.module.fail_json(msg=str(exc), reverted=True, **self.result())

    def extend(self) -> dict[str, Any]:
        """Move the deadline (fabric_apply.extend_armed: the code of ``fabtune-revert --extend`` too)."""
        deadline_s: int = self.module.params["deadline_s"]
        self._deadline_checked(deadline_s)
        if self.module.check_mode:
            return self._extend_checked(deadline_s)
        get = self.module.get_bin_path
        try:
            done = extend_armed(self.run_id, deadline_s, state_dir=self.state_dir, execute=self.execute,
                                systemctl=get("systemctl", required=True),
                                systemd_run=get("systemd-run", required=True),
                                script=self.module.params["script"])
        except RevertError as exc:
            self.module.fail_json(msg=str(exc), reverted=exc.reverted, **self.result())
        return self.result(changed=True, reverted=False, **done)

    def _extend_checked(self, deadline_s: int) -> dict[str, Any]:
        """What an extension would do (check mode: nothing is written, stopped or armed)."""
        self.gone()
        if not Path(self.path).exists():
            # An apply in check mode armed nothing: its extension would move that deadline.
            return self.result(changed=True, armed=False, reverted=False,
                               msg="check mode: would extend the revert armed by this apply")
        try:
            with Path(self.path).open() as handle:
                record = json.load(handle)
        except (OSError, ValueError) as exc:
            self.module.fail_json(msg=f"run {self.run_id} is not armed on this host ({exc})",
                                  reverted=False, **self.result())
        argv = arm_argv(self.module.get_bin_path("systemd-run", required=True), self.run_id, deadline_s,
                        record.get("script") or self.module.params["script"])
        return self.result(changed=True, armed=True, deadline=record.get("deadline"), reverted=False,
                           commands=[argv])

    def confirm(self) -> dict[str, Any]:
        """Keep the run (fabric_apply.confirm_armed: the code of ``fabtune-revert --confirm`` too)."""
        if self.module.check_mode:
            saved = Path(self.path).exists()
            if not saved:
                self.gone()
            return self.result(changed=saved or self.active(), reverted=False)
        try:
            done = confirm_armed(self.run_id, state_dir=self.state_dir, execute=self.execute,
                                 systemctl=self.module.get_bin_path("systemctl", required=True))
        except RevertError as exc:
            self.module.fail_json(msg=str(exc), reverted=exc.reverted, **self.result())
        return self.result(changed=done["changed"], reverted=False)


def main() -> None:
    module = AnsibleModule(argument_spec=get_argument_spec(), supports_check_mode=True,
                           required_if=[("state", "armed", ("snapshot",))])
    if not RUN_ID_RE.match(module.params["run_id"]):
        module.fail_json(
            msg=f"argument 'run_id' must match ^[A-Za-z0-9_.-]+$, not {module.params['run_id']!r}")
    revert = Revert(module)
    if module.params["state"] == "armed":
        module.exit_json(**revert.arm())
    if module.params["state"] == "extended":
        module.exit_json(**revert.extend())
    module.exit_json(**revert.confirm())


if __name__ == "__main__":
    main()
