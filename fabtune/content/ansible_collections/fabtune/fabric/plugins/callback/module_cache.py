# Copyright: fabtune contributors
# Apache License 2.0 (see LICENSE in this collection or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
---
name: module_cache
type: aggregate
short_description: Keep the modules' AnsiballZ payloads from one ansible-playbook run to the next
description:
  - Ansible builds each module's payload (the module and the module_utils it imports, zipped) once per
    run, in the run's own temporary directory (C(ansiballz_cache) under C(DEFAULT_LOCAL_TMP)), and
    removes it at the end. Each build reads and parses the source of every module_utils the module
    imports, about a quarter of a second of the controller's CPU on the first task of each module
    in each run.
  - At the start of a playbook this callback points that directory at O(directory), which outlives
    the run, so a later run takes the payloads already built. Ansible's own locking and its atomic
    writes of each payload keep concurrent runs apart, as they keep a run's workers apart.
  - O(directory) must name a payload set of the same modules, module_utils and ansible-core; fabtune
    names one directory per content hash of its collection's plugins and the ansible-core version
    (C(fabtune.ansible.module_cache_dir)). A directory that is not a directory owned by the user
    running Ansible, or that others can write to, is not used (the payloads are pickles Ansible loads).
requirements:
  - enabled in C(callbacks_enabled) (fabtune's runs enable it)
options:
  directory:
    description: The directory that keeps the payloads (not set, nothing is kept).
    type: path
    env:
      - name: FABTUNE_MODULE_CACHE
"""

import os
import stat
from pathlib import Path
from typing import Any

from ansible import constants
from ansible.plugins.callback import CallbackBase


def usable(directory: str) -> bool:
    """Whether ``directory`` is a real directory of this user that no one else can write to."""
    try:
        found = os.lstat(directory)
    except OSError:
        return False
    return (stat.S_ISDIR(found.st_mode) and found.st_uid == os.geteuid()
            and not found.st_mode & (stat.S_IWGRP | stat.S_IWOTH))


def link_cache(directory: str, local_tmp: str) -> bool:
    """Point ``local_tmp``'s ``ansiballz_cache`` at ``directory``; whether it now does."""
    link = Path(local_tmp) / "ansiballz_cache"
    if not usable(directory):
        return False
    try:
        link.symlink_to(directory)
    except FileExistsError:  # a payload was already built here: this run keeps its own
        return link.is_symlink() and str(link.readlink()) == directory
    except OSError:
        return False
    return True


class CallbackModule(CallbackBase):  # type: ignore[misc]  # ansible ships no type information
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "fabtune.fabric.module_cache"
    CALLBACK_NEEDS_ENABLED = True

    def v2_playbook_on_start(self, playbook: Any) -> None:
        directory = self.get_option("directory")
        if directory:
            link_cache(str(directory), str(constants.DEFAULT_LOCAL_TMP))
