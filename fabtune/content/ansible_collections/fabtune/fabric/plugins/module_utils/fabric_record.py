# Copyright: fabtune contributors
# Apache License 2.0 (see LICENSE in this collection or https://www.apache.org/licenses/LICENSE-2.0)
"""Record NIC knobs in the file ``fabtune-boot.service`` re-applies at boot (``fabric_apply.PERSISTED``).

The one implementation behind ``fabric_persist`` (a record on its own) and the ``persist`` option of
``fabric_sysfs`` and ``fabric_qos`` (the knobs a role sets, recorded in the same module run that sets
them). A record is planned first (validated, merged over the file, nothing written), so a knob that
could not be re-applied at boot fails the module before it changes anything; it is written after
the knobs are set, while the module holds the run armed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from ansible_collections.fabtune.fabric.plugins.module_utils.fabric_apply import (
    PERSISTED,
    merge_persisted,
    persisted_text,
    read_file,
    read_persisted,
    write_file,
)
from ansible_collections.fabtune.fabric.plugins.module_utils.fabric_desired import validate
from ansible_collections.fabtune.fabric.plugins.module_utils.fabric_host import netdev_split


def persist_args() -> dict[str, dict[str, Any]]:
    """The argument spec of the options of the modules that record what they set (their doc
    fragment is ``fabtune.fabric.persist``)."""
    return {
        "persist": {"type": "list", "elements": "str", "default": []},
        "persist_path": {"type": "path", "default": PERSISTED},
    }


class RecordError(Exception):
    """The knobs cannot be recorded (they would not apply at boot, or the file is unreadable)."""

    def __init__(self, msg: str, problems: Sequence[str] = (), argument: str = "") -> None:
        super().__init__(msg)
        self.problems = list(problems)
        self.argument = argument  # the module argument at fault, where it is one

    def message(self, argument: str = "") -> str:
        """The error, naming the module's own argument (``argument``) where the knobs were at fault."""
        name = argument or self.argument
        return f"argument '{name}' {self}" if self.argument and name else str(self)


@dataclass
class Record:
    """A planned record: the file's text now and after, and each persisted knob that changes."""

    path: str
    current: str | None
    text: str
    nics: dict[str, Any]
    changes: list[dict[str, Any]] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return self.current != self.text

    def diff(self) -> dict[str, str]:
        return {"before": self.current or "", "after": self.text,
                "before_header": self.path, "after_header": self.path}

    def write(self) -> None:
        """Write the file (atomic, mode 0644) where it changes; OSError when it cannot be written."""
        if self.changed:
            write_file(self.path, self.text, 0o644)


def knob_changes(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[dict[str, Any]]:
    """``{knob, before, after}`` per netdev knob whose persisted value differs (``persisted:IF.KNOB``)."""
    out: list[dict[str, Any]] = []
    for dev in sorted(set(before) | set(after)):
        old, new = before.get(dev, {}), after.get(dev, {})
        for key in sorted(set(old) | set(new)):
            if old.get(key) != new.get(key):
                out.append({"knob": f"persisted:{dev}.{key}", "before": old.get(key),
                            "after": new.get(key)})
    return out


def plan_record(nics: Mapping[str, Any], knobs: Sequence[str] | None, path: str) -> Record:
    """The record of ``knobs`` of ``nics`` (all when None) merged over ``path``; nothing written.

    Raises:
        RecordError: the knobs do not validate on this host's RoCE ports, the file cannot be read
            as a record, or the merged record would not apply at boot.
    """
    wanted = {dev: {k: v for k, v in (entry or {}).items() if knobs is None or k in knobs}
              for dev, entry in nics.items()}
    roce, other = netdev_split("/")
    problems, normal = validate({"nics": wanted}, roce, other, enforce_couplings=False)
    if problems:
        raise RecordError("cannot be persisted on this host: " + "; ".join(problems), problems, "nics")
    before, problem = read_persisted("/", path)
    if problem:
        raise RecordError(f"{problem} (fix or remove the file; the roles write it again)")
    after = merge_persisted(before, normal.get("nics"))
    problems, _merged = validate({"nics": after}, roce, other, enforce_couplings=False)
    if problems:  # what fabtune-boot would refuse at boot is refused now, with the file unchanged
        raise RecordError(f"{path} would not apply at boot with these knobs: {'; '.join(problems)}", problems)
    return Record(path, read_file(path), persisted_text(after), after, knob_changes(before, after))


def planned(module: Any, nics: Mapping[str, Any], argument: str) -> Record | None:
    """The record a module's O(persist) asks for, of ``nics`` (the module's ``argument``), planned and
    nothing written; None when O(persist) is empty. Fails the module when it cannot be recorded."""
    params = module.params
    if not params["persist"]:
        return None
    try:
        return plan_record(nics, params["persist"], params["persist_path"])
    except RecordError as exc:
        module.fail_json(msg=exc.message(argument), problems=exc.problems, path=params["persist_path"])
    raise AssertionError("unreachable: fail_json exits the module")


def with_record(result: dict[str, Any], record: Record, diff: bool) -> dict[str, Any]:
    """A module's result with its record's: the changes, the persisted knobs and the diff."""
    out = dict(result, changed=result["changed"] or record.changed, persisted=record.nics,
               changes=result["changes"] + record.changes)
    if diff:
        diffs = out.get("diff") or []
        diffs = list(diffs) if isinstance(diffs, list) else [diffs]
        out["diff"] = diffs + ([record.diff()] if record.changed else [])
    return out
