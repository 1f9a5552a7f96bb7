#!/usr/bin/python
# Copyright: fabtune contributors
# Apache License 2.0 (see LICENSE in this collection or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: fabric_sm_conf
short_description: Set keys of the subnet manager's opensm.conf in one call
description:
  - "Makes each key of O(keys) take its value in O(path), an opensm.conf (C(key value) lines, as
    C(opensm --create-config) writes them), in one module call: the last line that sets a key (the
    one opensm takes) is rewritten, or a line is added at the end for a key the file does not set.
    Every other line, comments included, stays as it is."
  - Lines are read as opensm's own parser reads them (C(osm_subn_parse_conf_file),
    C(opensm/osm_subnet.c)) - a C(#) anywhere ends a line, the key is the first word, the value the
    rest without surrounding blanks or one pair of matching quotes - so a key whose value opensm
    already takes is left alone, however its line is spaced.
  - Where O(path) does not exist it is created first with C(opensm --create-config PATH) (opensm's
    own defaults); in check mode that runs into a temporary directory instead, so the diff shows the
    file that would be written.
  - The file is replaced atomically (a temporary file in its directory, then renamed).
version_added: "1.0.0"
options:
  path:
    description: The opensm configuration file.
    type: path
    default: /etc/opensm/opensm.conf
  keys:
    description:
      - The keys and their values. Booleans are written C(TRUE)/C(FALSE), as opensm writes them.
      - A key must be one word; a value must not hold a C(#) (opensm would cut it there) or a line break.
    type: dict
    required: true
  create:
    description: Create a missing O(path) with C(opensm --create-config) (else a missing file fails).
    type: bool
    default: true
  timeout_s:
    description: The longest C(opensm --create-config) may run before the task fails.
    type: int
    default: 60
extends_documentation_fragment:
  - fabtune.fabric.armed_run
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
    details: The file's text before and after (before is empty where the file would be created).
  idempotent:
    support: full
author:
  - fabtune contributors
"""

EXAMPLES = r"""
- name: Route with up/down and turn QoS on
  become: true
  fabtune.fabric.fabric_sm_conf:
    keys:
      routing_engine: updn
      qos: true
  notify: Restart opensm
"""

RETURN = r"""
changed_keys:
  description: Each key whose value changed (or would), with its value before (null where unset) and after.
  returned: always
  type: dict
  sample: {routing_engine: ["(null)", "updn"]}
created:
  description: Whether the file was (or would be) created with C(opensm --create-config).
  returned: always
  type: bool
changes:
  description:
    - One entry per change, as every fabtune module reports them - C(knob) (C(PATH:key), or C(PATH)
      for the file created), C(before) and C(after).
  returned: always
  type: list
  elements: dict
  sample: [{knob: "/etc/opensm/opensm.conf:routing_engine", before: "(null)", after: updn}]
"""

import re
import tempfile
from pathlib import Path
from typing import Any

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.fabtune.fabric.plugins.module_utils.fabric_apply import (
    ApplyError,
    RevertError,
    bad_path,
    command_runner,
    read_file,
    while_armed,
    write_file,
)
from ansible_collections.fabtune.fabric.plugins.module_utils.fabric_formats import opensm_conf_lines

KEY_RE = re.compile(r"^[A-Za-z0-9_.]+$")


def get_argument_spec() -> dict[str, Any]:
    return {
        "armed_run": {"type": "str", "default": ""},
        "path": {"type": "path", "default": "/etc/opensm/opensm.conf"},
        "keys": {"type": "dict", "required": True, "no_log": False},
        "create": {"type": "bool", "default": True},
        "timeout_s": {"type": "int", "default": 60},
    }


def conf_value(value: object) -> str:
    """A value as opensm.conf spells it (booleans ``TRUE``/``FALSE``)."""
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    return str(value)


def problems(path: str, keys: dict[str, Any]) -> list[str]:
    """Every key or value opensm would not read back as given, and a path that is not one."""
    found = []
    problem = bad_path(path)
    if problem:
        found.append(f"path: {problem}")
    for key, value in keys.items():
        text = conf_value(value)
        if not KEY_RE.match(key):
            found.append(f"keys: {key!r} is not an opensm.conf key (one word of letters, digits, '_', '.')")
        elif "#" in text or "\n" in text or "\r" in text or not text.strip():
            found.append(f"keys.{key}: {text!r} cannot be an opensm.conf value (empty, '#' or a line break)")
    return found


def set_keys(text: str, keys: dict[str, str]) -> tuple[str, dict[str, list[str | None]]]:
    """``text`` with each key set: its last setting line rewritten, or one line appended.

    Returns the new text and ``{key: [before, after]}`` of the keys whose value opensm takes changed.
    """
    lines = text.splitlines(keepends=True)
    last: dict[str, tuple[int, str]] = {}  # key -> (its last line, the value opensm takes there)
    for index, line in enumerate(lines):
        for key, value in opensm_conf_lines(line):
            last[key] = (index, value)
    changed: dict[str, list[str | None]] = {}
    for key, value in keys.items():
        at, before = last.get(key, (None, None))
        if before == value:
            continue
        changed[key] = [before, value]
        if at is not None:
            lines[at] = f"{key} {value}\n"
        else:
            if lines and not lines[-1].endswith("\n"):
                lines[-1] += "\n"
            lines.append(f"{key} {value}\n")
    return "".join(lines), changed


def default_conf(module: AnsibleModule, path: str) -> str:
    """The file ``opensm --create-config`` writes (into a temporary directory in check mode)."""
    run = command_runner(timeout_s=module.params["timeout_s"])
    try:
        if not module.check_mode:
            run(["opensm", "--create-config", path])
            created = read_file(path)
        else:
            with tempfile.TemporaryDirectory(prefix="fabtune-opensm-") as tmp:
                scratch = str(Path(tmp) / "opensm.conf")
                run(["opensm", "--create-config", scratch])
                created = read_file(scratch)
    except ApplyError as exc:
        module.fail_json(msg=f"cannot create {path}: {exc}")
    if created is None:
        module.fail_json(msg=f"opensm --create-config wrote no {path}")
        return ""  # not reached: fail_json exits
    return created


def configure(module: AnsibleModule, keys: dict[str, str]) -> dict[str, Any]:
    path = module.params["path"]
    before = read_file(path)
    created = before is None
    if created:
        if not module.params["create"]:
            module.fail_json(msg=f"{path} does not exist (create: false)")
        if not module.check_mode and not Path(path).parent.is_dir():
            Path(path).parent.mkdir(mode=0o755, parents=True)
    text = default_conf(module, path) if created else before or ""
    after, changed = set_keys(text, keys)
    if changed and not module.check_mode:
        mode = Path(path).stat().st_mode & 0o7777 if Path(path).exists() else 0o644
        write_file(path, after, mode)
    diff = {"before_header": path, "after_header": path, "before": before or "", "after": after}
    changes = [{"knob": path, "before": None, "after": "created"}] if created else []
    changes += [{"knob": f"{path}:{key}", "before": old, "after": new} for key, (old, new) in changed.items()]
    return {"changed": created or bool(changed), "changed_keys": changed, "created": created,
            "changes": changes, "diff": diff}


def main() -> None:
    module = AnsibleModule(argument_spec=get_argument_spec(), supports_check_mode=True)
    found = problems(module.params["path"], module.params["keys"])
    if found:
        module.fail_json(msg="; ".join(found))
    keys = {key: conf_value(value) for key, value in module.params["keys"].items()}
    try:
        with while_armed("" if module.check_mode else module.params["armed_run"]):
            result = configure(module, keys)
    except RevertError as exc:
        module.fail_json(msg=str(exc), reverted=exc.reverted, changed=False)
    diff = result.pop("diff")
    if module._diff and result["changed"]:
        result["diff"] = diff
    module.exit_json(**result)


if __name__ == "__main__":
    main()
