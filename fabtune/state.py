"""One host's managed state, typed and frozen: its NICs' knobs, its NCCL settings, its subnet manager's.

The same shape is a host's state as read (a snapshot, what a rollback restores) and a state it is to
have (a profile's ``fabric_desired``, a move's "current + change", a tuning run's tuned state), so it
is named for what it describes, a host's state, not for one of those roles.

A section the tree leaves out is not managed (the host keeps what it has); a section present as null
is managed as "none" (``nccl: null`` removes ``/etc/nccl.conf``). ``sections`` keeps which sections the
tree holds, in its order, so that :meth:`HostState.tree` gives back exactly the tree it came from:
what the journal, the Ansible extra vars and the desired-state files are written from.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from fabtune.knobs import Change

MANAGED = ("nics", "nccl", "sm")
"""The sections a host's state manages (a facts tree also holds the read-only ``hardware``)."""

Tree = Mapping[str, Any]
Knobs = Mapping[str, Any]


def freeze(value: Any) -> Any:
    """``value`` made read-only all the way down: mappings as ``MappingProxyType``, lists as tuples."""
    if isinstance(value, Mapping):
        return MappingProxyType({k: freeze(v) for k, v in value.items()})
    if isinstance(value, (list, tuple)):
        return tuple(freeze(v) for v in value)
    return value


def thaw(value: Any) -> Any:
    """A frozen value as plain dicts and lists (JSON- and YAML-serialisable, a fresh copy)."""
    if isinstance(value, Mapping):
        return {k: thaw(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [thaw(v) for v in value]
    return value


@dataclass(frozen=True)
class HostState:
    """A host's managed state: ``nics`` (netdev, device or ``all`` to its knobs), ``nccl`` (NCCL
    variable to value), ``sm`` (OpenSM option to value); None where the tree leaves the section out
    or holds it as null (``sections`` says which).

    ``sections``: the sections the tree holds, in its order (empty: each section that is not None,
    in ``MANAGED`` order). ``extra``: sections the hosts' schema accepts beside the managed ones
    (``hardware`` in a hand-written profile), carried as they are.
    """

    nics: Mapping[str, Knobs] | None = None
    nccl: Mapping[str, Any] | None = None
    sm: Mapping[str, Any] | None = None
    sections: tuple[str, ...] = ()
    extra: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in (*MANAGED, "extra"):
            object.__setattr__(self, name, freeze(getattr(self, name)))
        if not self.sections:
            held = [k for k in MANAGED if getattr(self, k) is not None] + list(self.extra)
            object.__setattr__(self, "sections", tuple(held))
        missing = [k for k in MANAGED if getattr(self, k) is not None and k not in self.sections]
        missing += [k for k in self.extra if k not in self.sections]
        if missing:
            raise ValueError(f"sections: {self.sections!r} leaves out {', '.join(missing)} (set)")

    @classmethod
    def from_tree(cls, tree: Tree) -> HostState:
        """The state of a tree (``nics``, ``nccl``, ``sm``; any other section kept in ``extra``).

        Raises:
            ValueError: a section that is neither a mapping nor null.
        """
        bad = [k for k in MANAGED if tree.get(k) is not None and not isinstance(tree[k], Mapping)]
        if bad:
            raise ValueError(f"{bad[0]}: {tree[bad[0]]!r} must be a mapping or null")
        extra = {str(k): v for k, v in tree.items() if k not in MANAGED}
        return cls(**{k: tree.get(k) for k in MANAGED}, sections=tuple(str(k) for k in tree), extra=extra)

    @classmethod
    def of_facts(cls, facts: Tree) -> HostState:
        """The managed part of one host's facts, in ``MANAGED`` order: what a rollback restores."""
        return cls.from_tree({k: facts.get(k) for k in MANAGED if k in facts})

    def tree(self) -> dict[str, Any]:
        """The state as the plain tree it came from (same sections, same order, lists as lists)."""
        return {k: thaw(self._section(k)) for k in self.sections}

    def _section(self, name: str) -> Any:
        return getattr(self, name) if name in MANAGED else self.extra[name]

    def holds(self, section: str) -> bool:
        """Whether the state manages ``section`` (present in the tree, null included)."""
        return section in self.sections

    def with_change(self, change: Change) -> HostState:
        """This state with the change's knobs replaced on every NIC (``nics`` always held after), and
        its NCCL and SM keys set."""
        nics = {dev: {**knobs, **change.nic} for dev, knobs in (self.nics or {}).items()}
        state = self._replaced("nics", nics)
        if change.nccl:
            state = state._replaced("nccl", {**(self.nccl or {}), **change.nccl})
        if change.sm:
            state = state._replaced("sm", {**(self.sm or {}), **change.sm})
        return state

    def _replaced(self, section: str, value: Mapping[str, Any]) -> HostState:
        """This state with ``section`` set to ``value`` (added after the others when not held)."""
        sections = self.sections if section in self.sections else (*self.sections, section)
        return dataclasses.replace(self, sections=sections, **{section: value})

    def differences(self, found: HostState) -> list[str]:
        """Every knob whose value differs from ``found``'s, as ``path: expected -> found`` (values
        equal as text, such as ``3`` and ``"3"``, are the same)."""
        out: list[str] = []
        _diff("", _plain(self.tree()), _plain(found.tree()), out)
        return out


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _diff(path: str, a: Any, b: Any, out: list[str]) -> None:
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b)):
            _diff(f"{path}.{key}" if path else key, a.get(key), b.get(key), out)
    elif a != b and str(a) != str(b):
        out.append(f"{path}: {a!r} -> {b!r}")


def states_of(trees: Mapping[str, Tree]) -> dict[str, HostState]:
    """Per host, the state of its tree (a journaled snapshot, a host's pre-run record)."""
    return {host: HostState.from_tree(tree) for host, tree in trees.items()}


def trees_of(states: Mapping[str, HostState]) -> dict[str, dict[str, Any]]:
    """Per host, its state as a plain tree (for the journal, extra vars and files)."""
    return {host: state.tree() for host, state in states.items()}
