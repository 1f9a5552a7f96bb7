# Copyright: fabtune contributors
# Apache License 2.0 (see LICENSE in this collection or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
---
name: module_cache
type: aggregate
short_description: Keep the modules' payloads from one run to the next; load templating once before the forks
description:
  - Ansible builds each module's payload (the module and the module_utils it imports, zipped) once per
    run, in the run's own temporary directory (C(ansiballz_cache) under C(DEFAULT_LOCAL_TMP)), and
    removes it at the end. Each build reads and parses the source of every module_utils the module
    imports, about a quarter of a second of the controller's CPU on the first task of each module
    in each run.
  - At the start of a playbook this callback points that directory at O(directory), which outlives
    the run, so a later run takes the payloads already built. Ansible's own locking and its atomic
    writes of each payload keep concurrent runs apart, as they keep a run's workers apart.
  - O(directory) must name a payload set of the same modules, module_utils, ansible-core and
    controller Python bytecode format; fabtune names one directory per content hash of its
    collection's plugins, the ansible-core version and that format (C(fabtune.ansible.module_cache_key)).
    A directory that is not a directory owned by the user running Ansible, or that others can write
    to, is not used (the payloads are pickles Ansible loads).
  - Each payload this run builds also carries the bytecode of its Python files, compiled by the
    controller's Python (PEP 552, hash-based, unchecked). A host's Python imports a module from its
    bytecode where the bytecode's magic number is its own, and from the source where it is not
    (another Python version); the import of C(ansible.module_utils.basic) and its dependencies from
    source is about half of a short module run's CPU time on a host (docs/benchmarks.md).
  - At the start of a playbook it also evaluates one conditional in the process that forks
    Ansible's workers, so that the builtin Jinja test and filter plugins and the Jinja lexer are
    loaded there once. ansible-core leaves them to the first template of each worker, and each
    worker (one per task and host) then loads them for itself, about 13 ms of CPU on every task
    (docs/benchmarks.md). Nothing of the run's own data is templated.
requirements:
  - enabled in C(callbacks_enabled) (fabtune's runs enable it)
options:
  directory:
    description: The directory that keeps the payloads (not set, nothing is kept).
    type: path
    env:
      - name: FABTUNE_MODULE_CACHE
"""

import functools
import importlib.util
import marshal
import os
import stat
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ansible import constants
from ansible.executor import module_common
from ansible.plugins.callback import CallbackBase

UNCHECKED_HASH_PYC = 0b01
"""The flags of a PEP 552 hash-based pyc whose source is not checked on import."""


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


def bytecode(source: bytes, name: str) -> bytes | None:
    """The hash-based, unchecked pyc of ``source`` for this Python; None where it does not compile
    (the host's Python then reports it, as without bytecode)."""
    try:
        code = compile(source, name, "exec", dont_inherit=True)
    except (SyntaxError, ValueError):
        return None
    header = importlib.util.MAGIC_NUMBER + UNCHECKED_HASH_PYC.to_bytes(4, "little")
    return header + importlib.util.source_hash(source) + marshal.dumps(code)


def add_bytecode(zf: zipfile.ZipFile) -> int:
    """Add beside each ``.py`` of the payload ``zf`` (open for writing) its ``.pyc``; how many."""
    names = set(zf.namelist())
    added = 0
    for info in zf.infolist():
        if not info.filename.endswith(".py") or f"{info.filename}c" in names:
            continue
        compiled = bytecode(zf.read(info), info.filename)
        if compiled is None:
            continue
        pyc = zipfile.ZipInfo(f"{info.filename}c", date_time=info.date_time)
        pyc.compress_type = info.compress_type
        zf.writestr(pyc, compiled)
        added += 1
    return added


def _with_bytecode(add_module: Callable[..., None]) -> Callable[..., None]:
    @functools.wraps(add_module)
    def add(zf: zipfile.ZipFile, *args: Any, **kwargs: Any) -> None:
        add_module(zf, *args, **kwargs)
        add_bytecode(zf)

    add.fabtune_bytecode = True  # type: ignore[attr-defined]
    return add


def build_with_bytecode() -> bool:
    """Make this process's payload builds add bytecode (the workers Ansible forks inherit it).

    The module is the payload's last file (``module_common._add_module_to_zip``, ansible-core 2.19);
    where that function is not there (another ansible-core), payloads are built as Ansible builds
    them, and this returns False.
    """
    current = getattr(module_common, "_add_module_to_zip", None)
    if not callable(current):
        return False
    if not getattr(current, "fabtune_bytecode", False):
        module_common._add_module_to_zip = _with_bytecode(current)
    return True


WARM_CONDITIONAL = "fabtune_warm is defined and (fabtune_warm | default(0) | int) == 1"
"""Evaluated once before the first fork: a test (``defined``) and a filter (``default``) load every
builtin test and filter plugin, and any template builds the lexer the workers share."""


def warm_templating() -> bool:
    """Load the builtin Jinja test and filter plugins and the Jinja lexer in this process (the
    workers Ansible forks inherit them); whether it did. Where this ansible-core has no public
    ``Templar``/``trust_as_template`` of this shape, or the evaluation fails, nothing is done: the
    workers load them as Ansible leaves them to."""
    try:
        from ansible.parsing.dataloader import DataLoader
        from ansible.template import Templar, trust_as_template

        templar = Templar(loader=DataLoader(), variables={"fabtune_warm": 1})
        return templar.evaluate_conditional(trust_as_template(WARM_CONDITIONAL)) is True
    except Exception:  # a warm-up only: never the reason a playbook fails
        return False


class CallbackModule(CallbackBase):  # type: ignore[misc]  # ansible ships no type information
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "fabtune.fabric.module_cache"
    CALLBACK_NEEDS_ENABLED = True

    def v2_playbook_on_start(self, playbook: Any) -> None:
        build_with_bytecode()
        warm_templating()
        directory = self.get_option("directory")
        if directory:
            link_cache(str(directory), str(constants.DEFAULT_LOCAL_TMP))
