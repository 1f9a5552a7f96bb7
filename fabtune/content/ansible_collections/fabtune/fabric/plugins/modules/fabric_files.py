#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: fabtune contributors
# Apache License 2.0 (see LICENSE in this collection or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: fabric_files
short_description: Install the files, directories and links a fabtune role puts on a host, in one call
description:
  - Makes each of O(directories), O(files) and O(links) be as given, in that order, in one module
    call: one SSH round trip for what M(ansible.builtin.file), M(ansible.builtin.copy) and
    M(ansible.builtin.template) take several round trips each to do. The roles render the content
    on the controller (the C(ansible.builtin.template) and C(ansible.builtin.file) lookups) and
    pass it here.
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
  owner:
    description: Owner of everything written.
    type: str
    default: root
  group:
    description: Group of everything written.
    type: str
    default: root
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
"""

RETURN = r"""
changed_paths:
  description: The directories, files and links written or fixed (or that would be, in check mode).
  returned: always
  type: list
  elements: str
skipped:
  description: Files left out because their directory does not exist (O(files[].if_dir_exists)).
  returned: always
  type: list
  elements: str
"""

import os
import tempfile

from ansible.module_utils.basic import AnsibleModule


def get_argument_spec():
    return dict(
        directories=dict(type="list", elements="dict", default=[], options=dict(
            path=dict(type="path", required=True), mode=dict(type="str", default="0755"))),
        files=dict(type="list", elements="dict", default=[], options=dict(
            path=dict(type="path", required=True), content=dict(type="str", required=True, no_log=False),
            mode=dict(type="str", default="0644"), if_dir_exists=dict(type="bool", default=False))),
        links=dict(type="list", elements="dict", default=[], options=dict(
            path=dict(type="path", required=True), src=dict(type="path", required=True))),
        owner=dict(type="str", default="root"),
        group=dict(type="str", default="root"),
    )


def bad_path(path):
    """Why ``path`` is refused, or None: absolute and normalised only."""
    if not os.path.isabs(path) or os.path.normpath(path) != path:
        return "must be an absolute, normalised path, not %r" % path
    return None


def read_bytes(path):
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except (IOError, OSError):
        return None


class Installer(object):
    def __init__(self, module):
        self.module = module
        self.changed = []
        self.skipped = []
        self.diffs = []

    def attributes(self, path, mode):
        """Fix mode, owner and group; True when any differed (nothing changes in check mode)."""
        params, changed = self.module.params, False
        changed = self.module.set_mode_if_different(path, mode, changed)
        changed = self.module.set_owner_if_different(path, params["owner"], changed)
        return self.module.set_group_if_different(path, params["group"], changed)

    def directory(self, path, mode):
        if os.path.isdir(path):
            if self.attributes(path, mode):
                self.changed.append(path)
            return
        self.changed.append(path)
        self.diffs.append(dict(before_header=path, after_header=path, before="", after="directory\n"))
        if not self.module.check_mode:
            try:
                os.makedirs(path)
            except (IOError, OSError) as exc:
                self.module.fail_json(msg="cannot create %s: %s" % (path, exc), changed_paths=self.changed)
            self.attributes(path, mode)

    def write(self, path, text, mode):
        data = text.encode("utf-8")
        old = read_bytes(path)
        if old == data:
            if self.attributes(path, mode):
                self.changed.append(path)
            return
        self.changed.append(path)
        self.diffs.append(dict(before_header=path, after_header=path,
                               before=(old or b"").decode("utf-8", "replace"), after=text))
        if self.module.check_mode:
            return
        parent = os.path.dirname(path)
        if not os.path.isdir(parent):
            self.directory(parent, "0755")
        fd, tmp = tempfile.mkstemp(prefix=".fabtune-", dir=parent)
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
            self.attributes(tmp, mode)
            os.rename(tmp, path)
        except (IOError, OSError) as exc:
            if os.path.exists(tmp):
                os.unlink(tmp)
            self.module.fail_json(msg="cannot write %s: %s" % (path, exc), changed_paths=self.changed)

    def link(self, path, src):
        if os.path.islink(path) and os.readlink(path) == src:
            return
        if os.path.exists(path) and not os.path.islink(path):
            self.module.fail_json(msg="%s exists and is not a link (fabtune will not replace it)" % path,
                                  changed_paths=self.changed)
        self.changed.append(path)
        self.diffs.append(dict(before_header=path, after_header=path,
                               before=os.readlink(path) if os.path.islink(path) else "", after="-> %s\n" % src))
        if self.module.check_mode:
            return
        if os.path.islink(path):
            os.unlink(path)
        os.symlink(src, path)
        os.lchown(path, *self.ids())

    def ids(self):
        import grp
        import pwd

        return pwd.getpwnam(self.module.params["owner"]).pw_uid, grp.getgrnam(self.module.params["group"]).gr_gid


def check_paths(module):
    for kind in ("directories", "files", "links"):
        for entry in module.params[kind]:
            problem = bad_path(entry["path"])
            if problem:
                module.fail_json(msg="argument '%s' path %s" % (kind, problem))


def main():
    module = AnsibleModule(argument_spec=get_argument_spec(), supports_check_mode=True)
    check_paths(module)
    installer = Installer(module)
    for entry in module.params["directories"]:
        installer.directory(entry["path"], entry["mode"])
    for entry in module.params["files"]:
        if entry["if_dir_exists"] and not os.path.isdir(os.path.dirname(entry["path"])):
            installer.skipped.append(entry["path"])
            continue
        installer.write(entry["path"], entry["content"], entry["mode"])
    for entry in module.params["links"]:
        installer.link(entry["path"], entry["src"])
    result = dict(changed=bool(installer.changed), changed_paths=installer.changed, skipped=installer.skipped)
    if module._diff:
        result["diff"] = installer.diffs
    module.exit_json(**result)


if __name__ == "__main__":
    main()
