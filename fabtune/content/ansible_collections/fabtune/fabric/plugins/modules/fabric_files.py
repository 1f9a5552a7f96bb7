#!/usr/bin/python
# Copyright: fabtune contributors
# Apache License 2.0 (see LICENSE in this collection or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: fabric_files
short_description: Install the files, directories and links a fabtune role puts on a host, in one call
description:
  - "Makes each of O(directories), O(files) and O(links) be as given, in that order, then removes
    O(absent), in one module call: one SSH round trip for what M(ansible.builtin.file),
    M(ansible.builtin.copy) and M(ansible.builtin.template) take several round trips each to do. The
    roles render the content on the controller (the C(ansible.builtin.template) and
    C(ansible.builtin.file) lookups) and pass it here."
  - A file whose bytes, mode, owner and group already match is left alone; one that differs is
    written to a temporary file in its directory and moved over the old one (atomic).
  - Paths must be absolute and normalised (no C(..), no C(//)).
version_added: "1.0.0"
options:
  directories:
    description: Directories to create (parents included) with their mode.
    type: list
    elements: dict
    default: []
    suboptions:
      path: {description: The directory., type: path, required: true}
      mode: {description: Its mode (octal string)., type: str, default: "0755"}
  files:
    description: Files and their whole content.
    type: list
    elements: dict
    default: []
    suboptions:
      path: {description: The file., type: path, required: true}
      content: {description: Its whole content (text)., type: str, required: true}
      mode: {description: Its mode (octal string)., type: str, default: "0644"}
      if_dir_exists:
        description:
          - Write the file only where its directory already exists (a udev rule on a host without
            udev is skipped); otherwise the directory is created (mode 0755).
        type: bool
        default: false
  links:
    description: Symbolic links (replaced when they point elsewhere).
    type: list
    elements: dict
    default: []
    suboptions:
      path: {description: The link., type: path, required: true}
      src: {description: What it points to., type: path, required: true}
  absent:
    description:
      - Files (or links) to remove where they exist; a directory there is refused.
    type: list
    elements: path
    default: []
  systemd_reload:
    description:
      - Where this call changed anything and systemd runs the host (C(/run/systemd/system) exists,
        sd_booted(3)), reload systemd's unit files (C(systemctl daemon-reload), what
        C(systemctl enable) does after it links a unit) in the same module run, instead of a
        handler's two more module runs. Nothing is reloaded in check mode.
    type: bool
    default: false
  owner:
    description: Owner of everything written.
    type: str
    default: root
  group:
    description: Group of everything written.
    type: str
    default: root
extends_documentation_fragment:
  - fabtune.fabric.armed_run
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
    details: One diff per file that changes (its text before and after) and per directory or link created.
  idempotent:
    support: full
author:
  - fabtune contributors
"""

EXAMPLES = r"""
- name: Install a script and its unit
  become: true
  fabtune.fabric.fabric_files:
    files:
      - path: /usr/local/sbin/fabtune-boot
        content: "{{ lookup('ansible.builtin.template', 'fabtune-boot.j2') }}"
        mode: "0755"
      - path: /etc/systemd/system/fabtune-boot.service
        content: "{{ lookup('ansible.builtin.template', 'fabtune-boot.service.j2') }}"
    links:
      - path: /etc/systemd/system/multi-user.target.wants/fabtune-boot.service
        src: /etc/systemd/system/fabtune-boot.service
    systemd_reload: true
"""

RETURN = r"""
changed_paths:
  description: The directories, files and links written or fixed (or that would be, in check mode).
  returned: always
  type: list
  elements: str
skipped_paths:
  description:
    - Files left out because their directory does not exist (O(files[].if_dir_exists)).
    - Not named C(skipped), the key by which Ansible marks a whole task skipped.
  returned: always
  type: list
  elements: str
systemd_reloaded:
  description: Whether systemd's unit files were reloaded (O(systemd_reload)).
  returned: always
  type: bool
"""

import os
import tempfile
from pathlib import Path
from typing import Any

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.fabtune.fabric.plugins.module_utils.fabric_apply import (
    ApplyError,
    RevertError,
    bad_path,
    command_runner,
    while_armed,
)

# Where a running systemd is seen (sd_booted(3): the directory exists only while systemd manages the host).
SYSTEMD_RUNNING = "/run/systemd/system"
RELOAD_TIMEOUT_S = 90


def get_argument_spec() -> dict[str, Any]:
    return {
        "armed_run": {"type": "str", "default": ""},
        "directories": {"type": "list", "elements": "dict", "default": [], "options": {
            "path": {"type": "path", "required": True}, "mode": {"type": "str", "default": "0755"}}},
        "files": {"type": "list", "elements": "dict", "default": [], "options": {
            "path": {"type": "path", "required": True},
            "content": {"type": "str", "required": True, "no_log": False},
            "mode": {"type": "str", "default": "0644"}, "if_dir_exists": {"type": "bool", "default": False}}},
        "links": {"type": "list", "elements": "dict", "default": [], "options": {
            "path": {"type": "path", "required": True}, "src": {"type": "path", "required": True}}},
        "absent": {"type": "list", "elements": "path", "default": []},
        "systemd_reload": {"type": "bool", "default": False},
        "owner": {"type": "str", "default": "root"},
        "group": {"type": "str", "default": "root"},
    }


def read_bytes(path: str) -> bytes | None:
    try:
        return Path(path).read_bytes()
    except OSError:
        return None


class Installer:
    def __init__(self, module: AnsibleModule) -> None:
        self.module = module
        self.changed: list[str] = []
        self.skipped: list[str] = []
        self.diffs: list[dict[str, str]] = []

    def attributes(self, path: str, mode: str) -> bool:
        """Fix mode, owner and group; True when any differed (nothing changes in check mode)."""
        params, changed = self.module.params, False
        changed = self.module.set_mode_if_different(path, mode, changed)
        changed = self.module.set_owner_if_different(path, params["owner"], changed)
        return bool(self.module.set_group_if_different(path, params["group"], changed))

    def directory(self, path: str, mode: str) -> None:
        if Path(path).is_dir():
            if self.attributes(path, mode):
                self.changed.append(path)
            return
        self.changed.append(path)
        self.diffs.append({"before_header": path, "after_header": path, "before": "", "after": "directory\n"})
        if not self.module.check_mode:
            try:
                Path(path).mkdir(parents=True)
            except OSError as exc:
                self.module.fail_json(msg=f"cannot create {path}: {exc}", changed_paths=self.changed)
            self.attributes(path, mode)

    def write(self, path: str, text: str, mode: str) -> None:
        data = text.encode("utf-8")
        old = read_bytes(path)
        if old == data:
            if self.attributes(path, mode):
                self.changed.append(path)
            return
        self.changed.append(path)
        self.diffs.append({"before_header": path, "after_header": path,
                           "before": (old or b"").decode("utf-8", "replace"), "after": text})
        if self.module.check_mode:
            return
        parent = str(Path(path).parent)
        if not Path(parent).is_dir():
            self.directory(parent, "0755")
        fd, tmp = tempfile.mkstemp(prefix=".fabtune-", dir=parent)
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
            self.attributes(tmp, mode)
            Path(tmp).rename(path)  # atomic: readers see the old file or the new one
        except OSError as exc:
            if Path(tmp).exists():
                Path(tmp).unlink()
            self.module.fail_json(msg=f"cannot write {path}: {exc}", changed_paths=self.changed)

    def remove(self, path: str) -> None:
        target = Path(path)
        if not target.is_symlink() and not target.exists():
            return
        if target.is_dir() and not target.is_symlink():
            self.module.fail_json(msg=f"{path} is a directory (fabtune removes only files)",
                                  changed_paths=self.changed)
        self.changed.append(path)
        before = "" if target.is_symlink() else (read_bytes(path) or b"").decode("utf-8", "replace")
        self.diffs.append({"before_header": path, "after_header": path, "before": before, "after": ""})
        if self.module.check_mode:
            return
        try:
            target.unlink()
        except OSError as exc:
            self.module.fail_json(msg=f"cannot remove {path}: {exc}", changed_paths=self.changed)

    def link(self, path: str, src: str) -> None:
        link = Path(path)
        if link.is_symlink() and os.readlink(path) == src:
            return
        if link.exists() and not link.is_symlink():
            self.module.fail_json(msg=f"{path} exists and is not a link (fabtune will not replace it)",
                                  changed_paths=self.changed)
        self.changed.append(path)
        self.diffs.append({"before_header": path, "after_header": path,
                           "before": os.readlink(path) if link.is_symlink() else "", "after": f"-> {src}\n"})
        if self.module.check_mode:
            return
        if link.is_symlink():
            link.unlink()
        link.symlink_to(src)
        os.lchown(path, *self.ids())

    def ids(self) -> tuple[int, int]:
        import grp
        import pwd

        params = self.module.params
        return pwd.getpwnam(params["owner"]).pw_uid, grp.getgrnam(params["group"]).gr_gid


def check_paths(module: AnsibleModule) -> None:
    for kind in ("directories", "files", "links"):
        for entry in module.params[kind]:
            problem = bad_path(entry["path"])
            if problem:
                module.fail_json(msg=f"argument '{kind}' path {problem}")
    for path in module.params["absent"]:
        problem = bad_path(path)
        if problem:
            module.fail_json(msg=f"argument 'absent' path {problem}")


def install(module: AnsibleModule, installer: Installer) -> None:
    """The directories, then the files, then the links, then what must be absent."""
    for entry in module.params["directories"]:
        installer.directory(entry["path"], entry["mode"])
    for entry in module.params["files"]:
        if entry["if_dir_exists"] and not Path(entry["path"]).parent.is_dir():
            installer.skipped.append(entry["path"])
            continue
        installer.write(entry["path"], entry["content"], entry["mode"])
    for entry in module.params["links"]:
        installer.link(entry["path"], entry["src"])
    for path in module.params["absent"]:
        installer.remove(path)


def reload_systemd(module: AnsibleModule, installer: Installer) -> bool:
    """``systemctl daemon-reload`` where O(systemd_reload) asks, something changed and systemd runs."""
    if not module.params["systemd_reload"] or not installer.changed or module.check_mode:
        return False
    if not Path(SYSTEMD_RUNNING).is_dir():
        return False
    try:
        command_runner(timeout_s=RELOAD_TIMEOUT_S)(["systemctl", "daemon-reload"])
    except ApplyError as exc:
        module.fail_json(msg=f"{exc} (the files were written)", changed=True, changed_paths=installer.changed)
    return True


def main() -> None:
    module = AnsibleModule(argument_spec=get_argument_spec(), supports_check_mode=True)
    check_paths(module)
    installer = Installer(module)
    try:
        with while_armed("" if module.check_mode else module.params["armed_run"]):
            install(module, installer)
    except RevertError as exc:
        module.fail_json(msg=str(exc), reverted=exc.reverted, changed=False)
    result: dict[str, Any] = {"changed": bool(installer.changed), "changed_paths": installer.changed,
                              "skipped_paths": installer.skipped,
                              "systemd_reloaded": reload_systemd(module, installer)}
    if module._diff:
        result["diff"] = installer.diffs
    module.exit_json(**result)


if __name__ == "__main__":
    main()
