"""Profiles: one YAML file and one schema for every verb that takes ``--profile``.

A profile is a mapping with two known sections, and one file may hold both:

* ``fabric_desired``: the desired state every fabric role takes (``apply``, ``drift``,
  ``bootstrap``). Its schema and couplings live once, in the module_utils ``fabric_desired.py`` of
  the in-repo collection ``fabtune.fabric``: the hosts run the same code (module
  ``fabtune.fabric.fabric_validate``), so the controller and the hosts never disagree on what is
  valid. Here it is loaded from the collection's ``plugins/module_utils`` directory
  (``fabtune.collection.module_util``).
* ``fabtune_tune``: the tuning loop's options (``tune``, ``resume``), each value type-checked and
  range-checked here.

Each verb names the section it needs; every section present is checked, whichever verb reads the
file. ``check_against_rack`` then compares the desired state with the inventory: the fabric type
(RoCE or InfiniBand) and the subnet-manager hosts. Everything here runs before any lock, journal
run or host contact.
"""

from __future__ import annotations

import difflib
import re
import reprlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import yaml

from fabtune.collection import PROFILES, module_util
from fabtune.errors import ConfigError
from fabtune.inventory import InventoryInfo
from fabtune.knobs import GROUP_NAMES, ROLES, fabrics_of
from fabtune.state import HostState, states_of
from fabtune.tune.loop import TuneOptions
from fabtune.tune.stats import DecisionPolicy

SECTIONS = ("fabric_desired", "fabtune_tune", "fabric_desired_hosts", "fabric_persist_roles_by_host")
HOSTS_SECTION = "fabric_desired_hosts"
"""Hosts whose desired state differs from ``fabric_desired`` (a tuning run's per-host results),
each with its whole state; written by ``fabtune tune`` (:mod:`fabtune.desired`)."""
PERSIST_SECTION = "fabric_persist_roles_by_host"
"""Per host, the roles whose knobs fabtune keeps across reboots (a tuned desired state's: the roles
its kept moves ran there); absent, every role records its knobs (:mod:`fabtune.desired`)."""
HOST_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,252}")
PROFILE_KEYS = SECTIONS
MAX_BYTES = 1 << 20
"""A profile is a few kilobytes; anything over 1 MiB (``/dev/zero``, a log) is not one."""
POLICY_KEYS = ("alpha", "min_effect", "min_runs", "max_runs", "batch", "futility", "detect")
INT_OPTIONS = frozenset(("min_runs", "max_runs", "batch", "baseline_runs", "revert_deadline_s"))
FLOAT_OPTIONS = frozenset(("alpha", "min_effect", "futility", "detect", "pause_guard", "guard_loss",
                           "pair_guard", "pair_gain"))
OPTION_KEYS = (
    *POLICY_KEYS,
    "baseline_runs",
    "pause_guard",
    "guard_loss",
    "pair_guard",
    "pair_gain",
    "skip_groups",
    "revert_deadline_s",
    "pair_matrix",
)
PAIR_MATRIX_CHOICES = ("round", "full", "off")
DEFAULT_REVERT_DEADLINE_S = 300
FABRIC_WORDS = {"roce": "RoCE", "ib": "InfiniBand"}
FABRIC_ARTICLES = {"roce": "a RoCE", "ib": "an InfiniBand"}
SECTION_NAME = re.compile(r"[\w .-]{1,64}")
"""What a section name could look like; other keys are not echoed (a file given by mistake, such as
/etc/shadow, parses as a mapping of its lines)."""

_short = reprlib.Repr()
_short.maxstring = 60
_short.maxother = 60
_short.maxlist = _short.maxdict = 4
_short.maxlevel = 2


def show(value: object) -> str:
    """A value as the user wrote it, shortened (a profile can hold long lists)."""
    return _short.repr(value)


def did_you_mean(word: object, known: tuple[str, ...]) -> str:
    """``; did you mean X?`` for a near miss, else nothing."""
    close = difflib.get_close_matches(str(word), known, n=1)
    return f"; did you mean {close[0]}?" if close else ""


def desired_schema() -> ModuleType:
    """The shared schema module (the collection's ``plugins/module_utils/fabric_desired.py``)."""
    return module_util("fabric_desired")


@dataclass(frozen=True)
class Profile:
    """A validated profile: the desired state as written (what the hosts get), its normal form,
    the tune options, and the hosts with a state of their own.

    ``desired`` is empty (no section held) and ``tune`` None when the file has no such section
    (``sections`` says which it has).
    """

    path: Path
    desired: HostState = field(repr=False)
    normal: Mapping[str, Any] = field(repr=False)
    tune: Mapping[str, Any] | None = field(default=None, repr=False)
    sections: tuple[str, ...] = ("fabric_desired",)
    hosts: Mapping[str, HostState] = field(default_factory=dict, repr=False)
    persist_roles: Mapping[str, tuple[str, ...]] | None = field(default=None, repr=False)

    def playbook_vars(self) -> dict[str, Any]:
        """What the apply and drift playbooks take besides the desired state."""
        return persist_vars(self.persist_roles)


def validate_desired(desired: object, enforce_couplings: bool = True) -> tuple[list[str], dict[str, Any]]:
    """Every problem of a desired state (field and value named) and its normal form."""
    problems, normal = desired_schema().validate(desired, None, (), enforce_couplings)
    return list(problems), dict(normal)


# --------------------------------------------------------------------------- fabtune_tune


def _type_problem(key: str, value: object) -> list[str]:
    """The type problems of one fabtune_tune value (empty when its type is right)."""
    where = f"fabtune_tune.{key}"
    if key in INT_OPTIONS and (isinstance(value, bool) or not isinstance(value, int)):
        return [f"{where}: {show(value)} must be an integer"]
    if key in FLOAT_OPTIONS and (isinstance(value, bool) or not isinstance(value, (int, float))):
        return [f"{where}: {show(value)} must be a number"]
    if key == "pair_matrix" and not isinstance(value, bool) and value not in PAIR_MATRIX_CHOICES:
        return [f"{where}: {show(value)} must be one of {', '.join(PAIR_MATRIX_CHOICES)} (or true, false)"]
    if key != "skip_groups":
        return []
    if not isinstance(value, list):
        hint = f"; write [{value}]" if isinstance(value, str) and value in GROUP_NAMES else ""
        known = ", ".join(GROUP_NAMES)
        return [f"{where}: {show(value)} must be a list of move groups (known: {known}){hint}"]
    return [
        f"{where}[{i}]: {show(item)} is not a move group (known: {', '.join(GROUP_NAMES)})"
        + did_you_mean(item, GROUP_NAMES)
        for i, item in enumerate(value)
        if item not in GROUP_NAMES
    ]


def _pair_matrix(value: object) -> str:
    """``pair_matrix`` as a choice: YAML reads an unquoted ``off`` or ``no`` as false (off), true is
    the default round."""
    if isinstance(value, bool):
        return "round" if value else "off"
    return str(value)


def _range_problems(opts: TuneOptions, deadline: int) -> list[str]:
    policy = opts.policy
    problems = [f"fabtune_tune.{p}" for p in policy.problems()]
    if opts.baseline_runs < policy.min_runs:
        problems.append(
            f"fabtune_tune.baseline_runs: {opts.baseline_runs} must be at least min_runs ({policy.min_runs})"
        )
    if not 0 < opts.guard_loss < 1:
        problems.append(f"fabtune_tune.guard_loss: {opts.guard_loss} must be between 0 and 1 (a fraction)")
    for key in ("pair_guard", "pair_gain"):
        value = getattr(opts, key)
        if not 0 < value < 1:
            problems.append(f"fabtune_tune.{key}: {value} must be between 0 and 1 (a fraction)")
    if not opts.pause_guard >= 1:
        problems.append(f"fabtune_tune.pause_guard: {opts.pause_guard} must be at least 1 (a factor)")
    if deadline < 30:
        problems.append(f"fabtune_tune.revert_deadline_s: {deadline} must be at least 30 seconds")
    return problems


def check_tune(raw: object) -> tuple[list[str], TuneOptions, int]:
    """Every problem of a ``fabtune_tune`` section, and the options it gives (defaults where invalid).

    None is an empty section. Each problem names the field and its value.
    """
    if raw is None:
        raw = {}
    if not isinstance(raw, Mapping):
        problem = f"fabtune_tune: {show(raw)} must be a mapping of options (known: {', '.join(OPTION_KEYS)})"
        return [problem], TuneOptions(), DEFAULT_REVERT_DEADLINE_S
    problems = [
        f"fabtune_tune.{k}: {show(v)} is not a known option{did_you_mean(k, OPTION_KEYS)} "
        f"(known: {', '.join(OPTION_KEYS)})"
        for k, v in raw.items()
        if k not in OPTION_KEYS
    ]
    typed = {}
    for key in OPTION_KEYS:
        if key in raw:
            wrong = _type_problem(key, raw[key])
            problems += wrong
            if not wrong:
                typed[key] = raw[key]
    defaults = TuneOptions()
    opts = TuneOptions(
        DecisionPolicy(**{k: typed[k] for k in POLICY_KEYS if k in typed}),
        typed.get("baseline_runs", defaults.baseline_runs),
        float(typed.get("pause_guard", defaults.pause_guard)),
        float(typed.get("guard_loss", defaults.guard_loss)),
        tuple(typed.get("skip_groups", ())),
        pair_matrix=_pair_matrix(typed.get("pair_matrix", defaults.pair_matrix)),
        pair_guard=float(typed.get("pair_guard", defaults.pair_guard)),
        pair_gain=float(typed.get("pair_gain", defaults.pair_gain)),
    )
    deadline: int = typed.get("revert_deadline_s", DEFAULT_REVERT_DEADLINE_S)
    return problems + _range_problems(opts, deadline), opts, deadline


def tune_options(raw: object, source: str = "tuning options") -> tuple[TuneOptions, int]:
    """The tuning options and the revert deadline (s) of a ``fabtune_tune`` section.

    Raises:
        ConfigError: every unknown key and invalid value, each named.
    """
    problems, opts, deadline = check_tune(raw)
    if problems:
        raise ConfigError(source, problems)
    return opts, deadline


# --------------------------------------------------------------------------- the file


def _yaml_problem(err: yaml.YAMLError) -> str:
    """The parser's complaint and where, without the file's text (it may not be a profile at all)."""
    if isinstance(err, yaml.MarkedYAMLError) and err.problem_mark is not None:
        mark = err.problem_mark
        return f"{err.problem or err.context} at line {mark.line + 1}, column {mark.column + 1}"
    return type(err).__name__


def _read(path: Path, source: str) -> object:
    """The parsed YAML of a profile file, or one ConfigError naming the file and what is wrong."""
    return read_yaml(path, source, "a profile", MAX_BYTES)


def read_yaml(path: Path, source: str, what: str, max_bytes: int) -> object:
    """The parsed YAML of a small input file (a profile, a job spec), or one ConfigError naming
    ``source`` and what is wrong: unreadable, over ``max_bytes`` (not ``what``), not text, not YAML."""
    try:
        with path.open("rb") as handle:
            data = handle.read(max_bytes + 1)
    except OSError as err:
        raise ConfigError(source, [f"cannot read: {err.strerror or err}"]) from err
    if len(data) > max_bytes:
        raise ConfigError(source, [f"is larger than {max_bytes} bytes: not {what}"])
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ConfigError(
            source, [f"not a text file: byte {data[err.start]:#04x} at offset {err.start} is not UTF-8"]
        ) from err
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise ConfigError(source, [f"not valid YAML: {_yaml_problem(err)}"]) from err
    except RecursionError as err:
        raise ConfigError(source, ["not valid YAML: nested too deeply"]) from err


def _section_problems(doc: object, need: str) -> list[str]:
    """Problems with the top level: not a mapping, unknown sections, the needed section missing."""
    if not isinstance(doc, dict):
        # the content is not echoed: a file given by mistake (/etc/shadow) may hold secrets
        what = "empty" if doc is None else f"a {type(doc).__name__}, not a mapping"
        return [f"(top level): {what}; a profile must be a mapping with {' and/or '.join(SECTIONS)}"]
    named = [key for key in doc if isinstance(key, str) and SECTION_NAME.fullmatch(key)]
    problems = [
        f"{key}: is not a profile section{did_you_mean(key, SECTIONS)} (known: {', '.join(SECTIONS)})"
        for key in named
        if key not in SECTIONS
    ]
    hidden = len(doc) - len(named)
    if hidden:
        problems.append(
            f"(top level): {hidden} key(s) that cannot be section names (not shown); "
            f"a profile's sections are {', '.join(SECTIONS)}"
        )
    if need not in doc:
        have = ", ".join(named) or "none"
        problems.append(f"{need}: missing (sections here: {have}); this command reads {need}")
    return problems


def packaged(path: Path) -> Path:
    """``path``, or the profile fabtune ships under that bare name (``roce``, ``ib``) when no such file
    exists: the example profiles travel inside the installed package, wherever it is."""
    name = str(path)
    shipped = PROFILES / f"{name}.yml"
    if not path.exists() and "/" not in name and name.isidentifier() and shipped.is_file():
        return shipped
    return path


def load_profile(path: Path, need: str = "fabric_desired") -> Profile:
    """Load and validate a profile file: every section it holds, and the one the verb ``need``s.

    Args:
        path: a YAML file with ``fabric_desired`` and/or ``fabtune_tune``, or the bare name of a
            profile fabtune ships (``roce``, ``ib``).
        need: the section the verb reads (refused when absent).

    Returns:
        The validated profile.

    Raises:
        ConfigError: the file cannot be read or parsed, is not a mapping, has an unknown section,
            lacks ``need``, or a section is invalid (every problem, each naming field and value).
    """
    path = packaged(path)
    source = f"profile {path}"
    doc = _read(path, source)
    problems = _section_problems(doc, need)
    if not isinstance(doc, dict):
        raise ConfigError(source, problems)
    normal: dict[str, Any] = {}
    if "fabric_desired" in doc:
        desired_problems, normal = validate_desired(doc["fabric_desired"])
        problems += [f"fabric_desired.{p}" for p in desired_problems]
    if "fabtune_tune" in doc:
        problems += check_tune(doc["fabtune_tune"])[0]
    problems += host_state_problems(doc.get(HOSTS_SECTION), "fabric_desired" in doc)
    persist, found = read_persist_roles(doc.get(PERSIST_SECTION))
    problems += found
    if problems:
        raise ConfigError(source, problems)
    return Profile(
        path,
        HostState.from_tree(doc.get("fabric_desired") or {}),
        normal,
        (doc["fabtune_tune"] or {}) if "fabtune_tune" in doc else None,
        tuple(str(k) for k in doc),
        states_of(doc.get(HOSTS_SECTION) or {}),
        persist,
    )


def read_persist_roles(value: object) -> tuple[dict[str, tuple[str, ...]] | None, list[str]]:
    """A ``fabric_persist_roles_by_host`` section (None when absent: every role records its knobs)
    and its problems: a mapping of host names to lists of the roles that set knobs."""
    if value is None:
        return None, []
    if not isinstance(value, dict):
        return None, [f"{PERSIST_SECTION}: {show(value)} must be a mapping of host names to lists of roles"]
    known = ", ".join(ROLES)
    problems = [
        f"{PERSIST_SECTION}.{host}: {show(roles)} must be a list of roles ({known})"
        for host, roles in value.items()
        if not isinstance(roles, list) or not all(isinstance(r, str) and r in ROLES for r in roles)
    ]
    problems += [f"{PERSIST_SECTION}: {show(h)} is not a host name" for h in value if not isinstance(h, str)]
    if problems:
        return None, problems
    return {str(h): tuple(r) for h, r in value.items()}, []


def persist_vars(roles: Mapping[str, tuple[str, ...]] | None) -> dict[str, Any]:
    """The playbooks' ``fabric_persist_roles_by_host`` for ``roles`` (none when every role records)."""
    if roles is None:
        return {}
    return {PERSIST_SECTION: {h: list(r) for h, r in sorted(roles.items())}}


def host_state_problems(hosts: object, shared: bool) -> list[str]:
    """Problems of a ``fabric_desired_hosts`` section: a mapping of host names to desired states,
    beside a ``fabric_desired`` (the state of every other host)."""
    if hosts is None:
        return []
    if not isinstance(hosts, dict):
        return [f"{HOSTS_SECTION}: {show(hosts)} must be a mapping of host names to desired states"]
    alone = f"{HOSTS_SECTION}: needs fabric_desired beside it (every other host's state)"
    problems = [] if shared else [alone]
    for host, tree in hosts.items():
        if not isinstance(host, str) or not HOST_NAME.fullmatch(host):
            problems.append(f"{HOSTS_SECTION}: {show(host)} is not a host name")
            continue
        problems += [f"{HOSTS_SECTION}.{host}.{p}" for p in validate_desired(tree)[0]]
    return problems


# --------------------------------------------------------------------------- against the rack


def rack_problems(state: HostState, info: InventoryInfo) -> list[str]:
    """What in a (validated) desired state does not fit the rack: the other fabric type's settings,
    a subnet-manager section without subnet-manager hosts.

    Interface names (``nics.<netdev>``) are checked on each host by the first play of every apply
    (``fabtune.fabric.fabric_validate`` against the host's own ports) before anything changes.
    """
    desired = state.tree()  # values shown as written
    kind = FABRIC_WORDS[info.fabric]
    rack = f"the inventory {info.path} makes fabric {info.name} {kind}"
    problems = []
    for section in ("nics", "sm"):
        value = desired.get(section)
        owner = fabrics_of(section, "")
        if value and info.fabric not in owner:
            problems.append(
                f"fabric_desired.{section}: {show(value)} is {FABRIC_ARTICLES[owner[0]]}-only section; {rack}"
            )
    nccl = desired.get("nccl") or {}
    for key, value in nccl.items():
        owner = fabrics_of("nccl", str(key))
        if info.fabric not in owner:
            problems.append(
                f"fabric_desired.nccl.{key}: {show(value)} is {FABRIC_ARTICLES[owner[0]]} setting; {rack}"
            )
    if desired.get("sm") and info.fabric == "ib" and not info.sm_hosts:
        problems.append(
            f"fabric_desired.sm: {show(desired['sm'])} configures the subnet manager, but the inventory "
            f"{info.path} has no subnet_managers group (no host to run it on)"
        )
    return problems


def check_against_rack(profile: Profile, info: InventoryInfo) -> None:
    """Refuse a profile whose desired state does not fit the rack (see ``rack_problems``).

    Raises:
        ConfigError: every misfit, each naming the field, its value and the inventory.
    """
    problems = rack_problems(profile.desired, info)
    for host, tree in sorted(profile.hosts.items()):
        if host not in info.hosts:
            problems.append(f"{HOSTS_SECTION}.{host}: is not a host of the inventory {info.path}")
        problems += [f"{HOSTS_SECTION}.{host}: {p}" for p in rack_problems(tree, info)]
    if problems:
        raise ConfigError(f"profile {profile.path} on fabric {info.name}", problems)
