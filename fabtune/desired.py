"""The tuned desired state of a fabric: what a tuning run leaves, and what drift checks against.

A tuning run may leave hosts in different states (a repair that set one host's
``NCCL_IB_GID_INDEX``, a GDR level moved on a host whose NIC sits on the far socket). The file
keeps the state most hosts share as ``fabric_desired`` and, under ``fabric_desired_hosts``, the
whole state of each host that differs from it, so that drift checks every host against its own.

Under ``fabric_persist_roles_by_host`` it names, per host, the roles whose knobs the run's kept moves
set there: fabtune keeps those across reboots (``fabtune-boot``); the host's other knobs stay as it
keeps them itself, as the run found them, so drift checks their values but not their persistence,
and a remediation records nothing for them (the apply and drift playbooks pass it to the roles as
``fabric_persist_roles``).
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from fabtune.errors import ConfigError
from fabtune.paths import check_name, private_dir, under_home, write_private
from fabtune.profile import HOSTS_SECTION, PERSIST_SECTION, persist_vars, read_persist_roles, validate_desired
from fabtune.state import HostState, states_of, trees_of


@dataclass(frozen=True)
class TunedState:
    """A desired state per host: ``desired`` for every host not named in ``hosts``."""

    desired: HostState
    hosts: Mapping[str, HostState] = field(default_factory=dict)
    # per host, the roles whose knobs fabtune keeps across reboots there (None: every role's)
    persist_roles: Mapping[str, tuple[str, ...]] | None = None

    def playbook_vars(self) -> dict[str, Any]:
        """What the apply and drift playbooks take besides the desired state: the roles whose
        knobs fabtune keeps across reboots per host (``fabric_persist_roles_by_host``)."""
        return persist_vars(self.persist_roles)

    def for_host(self, host: str) -> HostState:
        return self.hosts.get(host, self.desired)

    def groups(self, hosts: Sequence[str]) -> list[tuple[HostState, list[str]]]:
        """``hosts`` grouped by the state each is to have: the shared state's group first (when
        any host takes it), then one group per host-specific state, in host order."""
        shared = [h for h in hosts if h not in self.hosts]
        own = [(self.hosts[h], [h]) for h in hosts if h in self.hosts]
        return ([(self.desired, shared)] if shared else []) + own


def _key(state: HostState) -> str:
    return json.dumps(state.tree(), sort_keys=True, default=str)


def split_by_host(states: Mapping[str, HostState]) -> TunedState:
    """The state most hosts share (on a tie, the first host's) and each other host's own."""
    if not states:
        return TunedState(HostState())
    hosts = sorted(states)
    counts = Counter(_key(states[h]) for h in hosts)
    top = max(counts.values())
    shared = next(h for h in hosts if counts[_key(states[h])] == top)
    common = _key(states[shared])
    return TunedState(states[shared], {h: states[h] for h in hosts if _key(states[h]) != common})


def tuned_path(fabric: str) -> Path:
    """``$FABTUNE_HOME/desired/<fabric>.yml`` (a profile file: ``fabric_desired``, and
    ``fabric_desired_hosts`` when hosts differ).

    Raises:
        ConfigError: when ``fabric`` is not a valid name.
    """
    return under_home("desired", f"{check_name('fabric name', fabric)}.yml")


def save_tuned(fabric: str, desired: HostState | TunedState, run_id: str) -> Path:
    """Write the tuned desired state as a profile usable with ``fabtune apply`` and ``fabtune drift``."""
    state = desired if isinstance(desired, TunedState) else TunedState(desired)
    path = tuned_path(fabric)
    private_dir(path.parent)
    header = f"# Tuned desired state of fabric {fabric!r}, written by run {run_id} at {time.ctime()}\n"
    doc: dict[str, Any] = {"fabric_desired": state.desired.tree()}
    if state.hosts:
        doc[HOSTS_SECTION] = trees_of(state.hosts)
    doc.update(state.playbook_vars())
    return write_private(path, header + yaml.safe_dump(doc, sort_keys=True))


def load_tuned(fabric: str) -> TunedState | None:
    """The tuned desired state, or None when no tuning run has written one.

    Raises:
        ConfigError: the file's sections are not mappings, or a state does not validate (edited by
            hand), naming every problem.
    """
    path = tuned_path(fabric)
    if not path.exists():
        return None
    doc = yaml.safe_load(path.read_text()) or {}
    desired, hosts = doc.get("fabric_desired") or {}, doc.get(HOSTS_SECTION) or {}
    sections = (("fabric_desired", desired), (HOSTS_SECTION, hosts))
    problems = [f"{name}: must be a mapping" for name, value in sections if not isinstance(value, dict)]
    problems += [f"{HOSTS_SECTION}.{h}: must be a mapping (that host's desired state)"
                 for h, t in (hosts.items() if isinstance(hosts, dict) else ()) if not isinstance(t, dict)]
    if problems:
        raise ConfigError(f"tuned desired state {path}", problems)
    problems = [f"fabric_desired.{p}" for p in validate_desired(desired)[0]]
    for host, tree in sorted(hosts.items()):
        problems += [f"{HOSTS_SECTION}.{host}.{p}" for p in validate_desired(tree)[0]]
    persist, found = read_persist_roles(doc.get(PERSIST_SECTION))
    problems += found
    if problems:
        raise ConfigError(f"tuned desired state {path}", problems)
    return TunedState(HostState.from_tree(desired), states_of({str(h): t for h, t in hosts.items()}), persist)
