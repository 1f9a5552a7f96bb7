#!/usr/bin/python
# Copyright: fabtune contributors
# Apache License 2.0 (see LICENSE in this collection or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: fabric_remove
short_description: Remove what fabtune installed on a host (files, trees, units, shared directories)
description:
  - "Takes the one list of what fabtune installs (role C(fabric_uninstall), C(vars/main.yml)) and, in
    one module call, looks for each entry, stops and disables the units of those present (where
    systemd runs the host), removes each present path with everything in it, then the shared
    directories left holding nothing but entries of the list, and reloads systemd: one SSH round
    trip for what M(ansible.builtin.stat), M(ansible.builtin.systemd_service),
    M(ansible.builtin.slurp), M(ansible.builtin.find) and M(ansible.builtin.file) loops take one
    round trip per path to do."
  - A file that holds a knob's value (O(entries[].knob)) is removed only when it begins with
    O(header) (a role wrote it whole), and never with O(keep_knob_files).
  - Systemd runs the host when C(/run/systemd/system) is a directory (as Ansible's C(service_mgr)
    fact reads it); elsewhere units are left alone and only their files are removed. Each
    C(systemctl) command is an argv list held to O(timeout) seconds.
  - Paths must be absolute, normalised (no C(..), no C(//)) and at least two levels deep; unit
    names are plain systemd unit names.
version_added: "1.0.0"
options:
  entries:
    description: What fabtune installs, one entry per path (the role's C(_fabric_uninstall_installed)).
    type: list
    elements: dict
    required: true
    suboptions:
      path:
        description: Removed with everything in it (a file, a symbolic link or a directory tree).
        type: path
        required: true
      unit:
        description:
          - The systemd unit O(entries[].path) defines, stopped and disabled before anything is
            removed (where systemd runs the host); systemd is reloaded after.
        type: str
      when_empty:
        description:
          - A directory fabtune shares with others, removed only when nothing but entries of this
            list is left in it.
        type: bool
        default: false
      knob:
        description:
          - A file holding a knob's value, written whole by a role, removed only when it begins with
            O(header) and O(keep_knob_files) is not set.
        type: bool
        default: false
  header:
    description:
      - The header every role's template writes first (C(ansible_managed) through the C(comment)
        filter). Required, not empty, when an entry is a O(entries[].knob).
    type: str
    default: ""
  keep_knob_files:
    description:
      - Leave every O(entries[].knob) file as it is (a restore, C(fabtune uninstall --restore RUN),
        has just put it back).
    type: bool
    default: false
  timeout:
    description: Seconds each C(systemctl) command may take before the module fails naming it.
    type: int
    default: 60
attributes:
  check_mode:
    support: full
    details: The units are read (C(systemctl is-active), C(is-enabled)); nothing is stopped or removed.
  diff_mode:
    support: full
    details: One diff per unit stopped or disabled and per path removed (a file's text, a tree's listing).
  idempotent:
    support: full
author:
  - fabtune contributors
"""

EXAMPLES = r"""
- name: Remove what fabtune installed
  become: true
  fabtune.fabric.fabric_remove:
    entries:
      - path: /etc/systemd/system/fabtune-boot.service
        unit: fabtune-boot.service
      - path: /usr/local/lib/fabtune
      - path: /etc/fabtune
        when_empty: true
      - path: /etc/nccl.conf
        knob: true
    header: "{{ lookup('ansible.builtin.config', 'DEFAULT_MANAGED_STR') | comment }}"
"""

RETURN = r"""
present:
  description: The entries' paths that existed when the module started.
  returned: always
  type: list
  elements: str
stopped:
  description: The units stopped or disabled (or that would be, in check mode).
  returned: always
  type: list
  elements: str
removed:
  description:
    - The paths removed (or that would be, in check mode), in the list's order, the shared
      directories last. A path inside another one removed is not listed again.
  returned: always
  type: list
  elements: str
kept:
  description: The entries present and left in place, each with why.
  returned: always
  type: list
  elements: dict
  contains:
    path: {description: The entry's path., type: str}
    why: {description: Why it stays., type: str}
systemd:
  description: Whether systemd runs the host (units are stopped and disabled only then).
  returned: always
  type: bool
reloaded:
  description: Whether systemd was reloaded (or would be, in check mode) after the removal.
  returned: always
  type: bool
"""

import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.fabtune.fabric.plugins.module_utils.fabric_apply import Exec, bad_path, exec_argv

SYSTEMD_RUNTIME = "/run/systemd/system"  # a directory only where systemd is the init (sd_booted(3))
ACTIVE = frozenset({"active", "activating", "reloading"})
ENABLED = frozenset({"enabled", "enabled-runtime"})
UNIT_NAME = re.compile(r"[A-Za-z0-9:_.@\\][A-Za-z0-9:_.@\\-]*\.[a-z]+")
DIFF_TEXT_BYTES = 65536  # a file's text shown in a diff up to this size, its size past it
DIFF_TREE_LINES = 200


def get_argument_spec() -> dict[str, Any]:
    return {
        "entries": {"type": "list", "elements": "dict", "required": True, "options": {
            "path": {"type": "path", "required": True},
            "unit": {"type": "str"},
            "when_empty": {"type": "bool", "default": False},
            "knob": {"type": "bool", "default": False}}},
        "header": {"type": "str", "default": ""},
        "keep_knob_files": {"type": "bool", "default": False},
        "timeout": {"type": "int", "default": 60},
    }


def entry_problems(entry: dict[str, Any]) -> list[str]:
    """What is wrong with one entry, each naming the field and its value."""
    path, unit = entry["path"], entry["unit"]
    problems = [f"argument 'entries' path {problem}" for problem in [bad_path(path)] if problem]
    if not problems and len(Path(path).parts) < 3:
        problems.append(f"argument 'entries' path must be at least two levels deep, not {path!r}")
    if unit is not None and not UNIT_NAME.fullmatch(unit):
        problems.append(f"argument 'entries' unit must be a systemd unit name, not {unit!r}")
    if entry["when_empty"] and entry["knob"]:
        problems.append(f"argument 'entries' {path!r}: when_empty and knob are mutually exclusive")
    return problems


def check_args(module: AnsibleModule) -> None:
    params = module.params
    problems = [p for entry in params["entries"] for p in entry_problems(entry)]
    if params["timeout"] <= 0:
        problems.append(f"argument 'timeout' must be a positive number of seconds, not {params['timeout']}")
    if not params["header"] and any(e["knob"] for e in params["entries"]):
        problems.append("argument 'header' must not be empty: a knob file goes only when it begins with it")
    if problems:
        module.fail_json(msg="; ".join(problems))


def begins_with(path: str, header: str) -> bool:
    try:
        with Path(path).open("rb") as handle:
            head = handle.read(len(header.encode("utf-8")))
    except OSError:
        return False
    return head == header.encode("utf-8")


def inside(path: str, tree: str) -> bool:
    return path.startswith(tree.rstrip("/") + "/")


@dataclass
class Plan:
    """What goes, decided before anything changes (the same in check mode)."""

    present: list[str] = field(default_factory=list)
    units: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    kept: list[dict[str, str]] = field(default_factory=list)

    def keep(self, path: str, why: str) -> None:
        self.kept.append({"path": path, "why": why})

    def remove(self, path: str) -> None:
        if not any(path == done or inside(path, done) for done in self.removed):
            self.removed.append(path)


def knob_goes(plan: Plan, path: str, header: str, keep: bool) -> bool:
    if keep:
        plan.keep(path, "a knob file, as the restore put it back")
        return False
    if not begins_with(path, header):
        plan.keep(path, "a knob file fabtune did not write (no ansible_managed header first)")
        return False
    return True


def shared_dirs(plan: Plan, shared: list[str]) -> None:
    """Each shared directory goes when nothing but what goes is in it (the deepest first)."""
    for path in sorted(shared, key=lambda p: -len(Path(p).parts)):
        try:
            names = sorted(child.name for child in Path(path).iterdir())
        except NotADirectoryError:
            names = []
        except OSError as exc:
            plan.keep(path, f"cannot be read: {exc.strerror}")
            continue
        left = [name for name in names if str(Path(path, name)) not in plan.removed]
        if left:
            more = f" and {len(left) - 5} more" if len(left) > 5 else ""
            plan.keep(path, "holds " + ", ".join(left[:5]) + more)
        else:
            plan.remove(path)


def make_plan(entries: list[dict[str, Any]], header: str, keep_knob_files: bool) -> Plan:
    plan, shared = Plan(), []
    for entry in entries:
        path = entry["path"]
        if not os.path.lexists(path):
            continue
        plan.present.append(path)
        if entry["unit"]:
            plan.units.append(entry["unit"])
        if entry["when_empty"]:
            shared.append(path)
        elif not entry["knob"] or knob_goes(plan, path, header, keep_knob_files):
            plan.remove(path)
    shared_dirs(plan, shared)
    return plan


def tree_text(path: str) -> str:
    lines = []
    for top, dirs, files in os.walk(path):
        dirs.sort()
        rel = Path(top).relative_to(path)
        lines += [str(rel / name) + ("/" if name in dirs else "") for name in dirs + sorted(files)]
    shown = sorted(lines)[:DIFF_TREE_LINES]
    more = [f"... and {len(lines) - len(shown)} more"] if len(lines) > len(shown) else []
    return "".join(f"{line}\n" for line in ["directory:", *shown, *more])


def before_text(path: str) -> str:
    """What a path holds, for its diff: a link's target, a tree's listing, a file's text (or size)."""
    target = Path(path)
    if target.is_symlink():
        return f"symlink -> {os.readlink(path)}\n"
    if target.is_dir():
        return tree_text(path)
    try:
        size = target.stat().st_size
        if size > DIFF_TEXT_BYTES:
            return f"{size} bytes\n"
        return target.read_bytes().decode("utf-8", "replace")
    except OSError as exc:
        return f"(unreadable: {exc.strerror})\n"


def last_line(text: str) -> str:
    lines = text.splitlines()
    return lines[-1].strip() if lines else ""


def delete(path: str) -> None:
    """Remove a path and everything in it; a link goes, never what it points to."""
    target = Path(path)
    if target.is_dir() and not target.is_symlink():
        shutil.rmtree(path)
    elif os.path.lexists(path):
        target.unlink()


class Remover:
    """Carries out a plan: units stopped and disabled, paths removed, systemd reloaded."""

    def __init__(self, module: AnsibleModule, plan: Plan, execute: Exec) -> None:
        self.module, self.plan, self.execute = module, plan, execute
        self.systemd = Path(SYSTEMD_RUNTIME).is_dir()
        self.stopped: list[str] = []
        self.removed: list[str] = []
        self.reloaded = False
        self.diffs: list[dict[str, str]] = []

    def result(self) -> dict[str, Any]:
        return {"changed": bool(self.stopped or self.removed), "present": self.plan.present,
                "stopped": self.stopped, "removed": self.removed, "kept": self.plan.kept,
                "systemd": self.systemd, "reloaded": self.reloaded}

    def fail(self, msg: str) -> None:
        self.module.fail_json(msg=msg, **self.result())

    def systemctl(self, *args: str) -> tuple[int, str]:
        argv = [self.module.get_bin_path("systemctl", required=True), *args]
        rc, out, err = self.execute(argv)
        if rc == 124:
            self.fail(f"systemctl {' '.join(args)} did not finish within {self.module.params['timeout']} s")
        return rc, (out + err).strip()

    def change(self, *args: str) -> None:
        if self.module.check_mode:
            return
        rc, output = self.systemctl(*args)
        if rc != 0:
            self.fail(f"systemctl {' '.join(args)} failed (rc {rc}): {output[-500:]}")

    def unit(self, unit: str) -> None:
        """Stopped and disabled, as ansible.builtin.systemd_service state=stopped enabled=false does."""
        state = last_line(self.systemctl("is-active", unit)[1])
        enabled = last_line(self.systemctl("is-enabled", unit)[1])
        if state not in ACTIVE and enabled not in ENABLED:
            return
        self.stopped.append(unit)
        self.diffs.append({"before_header": f"unit {unit}", "after_header": f"unit {unit}",
                           "before": f"{state}, {enabled}\n", "after": "inactive, disabled\n"})
        if state in ACTIVE:
            self.change("stop", unit)
        if enabled in ENABLED:
            self.change("disable", unit)

    def remove(self, path: str) -> None:
        self.removed.append(path)
        self.diffs.append({"before_header": path, "after_header": path,
                           "before": before_text(path), "after": ""})
        if self.module.check_mode:
            return
        try:
            delete(path)
        except OSError as exc:
            self.removed.pop()
            self.fail(f"cannot remove {path}: {exc}")

    def run(self) -> None:
        if self.systemd:
            for unit in self.plan.units:
                self.unit(unit)
        for path in self.plan.removed:
            self.remove(path)
        if self.systemd and (self.stopped or self.removed):
            self.reloaded = True
            self.change("daemon-reload")


def main() -> None:
    module = AnsibleModule(argument_spec=get_argument_spec(), supports_check_mode=True)
    check_args(module)
    params = module.params
    plan = make_plan(params["entries"], params["header"], params["keep_knob_files"])
    remover = Remover(module, plan, exec_argv(params["timeout"]))
    remover.run()
    result = remover.result()
    if module._diff:
        result["diff"] = remover.diffs
    module.exit_json(**result)


if __name__ == "__main__":
    main()
