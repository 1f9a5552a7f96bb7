"""What fabtune reads from an Ansible inventory itself: the fabric's name and type, the hosts."""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
import subprocess
import sys
import threading
from collections import defaultdict
from collections.abc import Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ansible.module_utils.parsing.convert_bool import boolean

from fabtune.errors import ConfigError
from fabtune.knobs import LosslessClass
from fabtune.paths import check_name

LAUNCHERS = ("mpirun", "srun")
INVENTORY_TIMEOUT_S = 60
# An inventory Ansible cannot parse is an error, not an empty inventory; a key given twice in one
# YAML mapping (a host listed twice) is an error, not a silent merge.
STRICT_INVENTORY_ENV = {
    "ANSIBLE_INVENTORY_UNPARSED_FAILED": "True",
    "ANSIBLE_INVENTORY_ANY_UNPARSED_IS_FAILED": "True",
    "ANSIBLE_DUPLICATE_YAML_DICT_KEY": "error",
}
_ANSIBLE_SAYS_RE = re.compile(r"^\[(?:ERROR\]|WARNING\]: Failed to parse)")


@dataclass(frozen=True)
class InventoryInfo:
    """The facts about an inventory that fabtune needs before any play runs."""

    path: Path
    name: str
    fabric: str
    hosts: tuple[str, ...]
    sm_hosts: tuple[str, ...]
    launcher: str
    oob_interface: str | None
    bench_timeout_s: int | None = None  # fabtune_bench_timeout_s: every benchmark launch's deadline
    lossless: LosslessClass | None = None  # fabtune_lossless: the class the switches run (RoCE)
    sm_flavor: str | None = None  # fabtune_sm_flavor: the subnet manager (IB): upstream or mlnx
    # each host's variables as this read found them (host_vars' answer), so that a command reads its
    # inventory once; None where the info was not read from the file
    hostvars: Mapping[str, Mapping[str, Any]] | None = field(default=None, repr=False, compare=False)


def _listed(path: Path, ahead: _Ahead | None = None) -> subprocess.CompletedProcess[str]:
    """``ansible-inventory --list`` of ``path``, as it answered; for a read started ahead, its
    process is handed to ``ahead`` (which ends it when no verb takes the answer).

    Raises:
        subprocess.TimeoutExpired: past ``INVENTORY_TIMEOUT_S``.
    """
    exe = Path(sys.executable).parent / "ansible-inventory"
    argv = [str(exe) if exe.exists() else "ansible-inventory", "-i", str(path), "--list"]
    with subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, env={**os.environ, **STRICT_INVENTORY_ENV}) as proc:
        if ahead is not None:
            ahead.started(proc)
        try:
            out, err = proc.communicate(timeout=INVENTORY_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            raise
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


@dataclass
class _Ahead:
    """A read started ahead: the file's identity when it started, its answer, and its process
    until it ends (``drop`` ends it, and one that starts after the drop, at once)."""

    identity: tuple[int, int, int]
    key: tuple[object, ...] | None = None  # what the answer depends on when it started (_memo_key)
    answer: Future[subprocess.CompletedProcess[str]] = field(default_factory=Future)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _proc: subprocess.Popen[str] | None = None
    _dropped: bool = False

    def started(self, proc: subprocess.Popen[str]) -> None:
        with self._lock:
            self._proc = proc
            if self._dropped:
                proc.kill()

    def drop(self) -> None:
        with self._lock:
            self._dropped = True
            if self._proc is not None and self._proc.poll() is None:
                self._proc.kill()


# Reads started ahead (``read_ahead``), by path.
_AHEAD: dict[Path, _Ahead] = {}
INVENTORY_FLAGS = ("-i", "--inventory")


def _identity(path: Path) -> tuple[int, int, int] | None:
    try:
        found = path.stat()
    except OSError:
        return None
    return (found.st_ino, found.st_size, found.st_mtime_ns)


def read_ahead(args: Sequence[str]) -> None:
    """Start ``ansible-inventory`` on the inventory that command-line ``args`` name (``-i``/
    ``--inventory``), on a thread, so that it runs while the verb's modules load (about 0.7 s each
    here, for a tuning run). The verb's own read takes its answer where the file is still the one
    read (``_ansible_inventory``); ``forget_ahead`` drops one no read took."""
    given = _inventory_arg(args)
    if given is None:
        return
    path = Path(given).absolute()
    identity = _identity(path)
    if identity is None or not path.is_file() or path in _AHEAD:
        return
    ahead = _AHEAD[path] = _Ahead(identity, _memo_key(path))
    # a daemon thread: a command that ends before taking the answer does not wait for it
    threading.Thread(target=_settle, args=(ahead, path), name="fabtune-inventory", daemon=True).start()


def _settle(ahead: _Ahead, path: Path) -> None:
    try:
        ahead.answer.set_result(_listed(path, ahead))
    except BaseException as err:  # the reader re-raises it where it takes the answer
        ahead.answer.set_exception(err)


def _inventory_arg(args: Sequence[str]) -> str | None:
    """The value of the first ``-i``/``--inventory`` in ``args`` (None: not given)."""
    for at, arg in enumerate(args):
        if arg == "--":
            return None
        if arg in INVENTORY_FLAGS:
            return args[at + 1] if at + 1 < len(args) else None
        if arg.startswith("--inventory="):
            return arg.split("=", 1)[1]
        if arg.startswith("-i") and not arg.startswith("--") and len(arg) > 2:
            return arg[2:]
    return None


def forget_ahead() -> None:
    """Drop the reads ``read_ahead`` started that no verb took, and end their processes: a command
    refused before it read its inventory leaves no ``ansible-inventory`` running."""
    for ahead in _AHEAD.values():
        ahead.drop()
    _AHEAD.clear()


def _answer(path: Path, key: tuple[object, ...] | None) -> tuple[subprocess.CompletedProcess[str], bool]:
    """``ansible-inventory``'s answer for ``path``: the read started ahead where the file is the
    same, else a read now; and whether the answer was read under ``key`` (``_memo_key``) from
    start to end, so that it may be kept."""
    ahead = _AHEAD.get(path)
    if ahead is not None and ahead.identity == _identity(path):
        del _AHEAD[path]
        return ahead.answer.result(), key is not None and ahead.key == key
    _drop_ahead(path)
    return _listed(path), True


def _drop_ahead(path: Path) -> None:
    """End a read started ahead for ``path`` that is no longer needed."""
    ahead = _AHEAD.pop(path, None)
    if ahead is not None:
        ahead.drop()


# ansible-inventory's answers this process already has, by path: the key they were read under and
# the answer's text (``_memo_key``). In memory only: an answer holds every host variable.
_MEMO: dict[Path, tuple[tuple[object, ...], str]] = {}
_MEMO_MAX = 16
_MEMO_LOCK = threading.Lock()
# A YAML inventory with a top-level plugin key configures an inventory plugin (Ansible's auto
# plugin): its hosts come from elsewhere (a cloud API, a CMDB), so its answer is never reused.
_PLUGIN_RE = re.compile(rb"^plugin\s*:", re.MULTILINE)
_VARS_DIRS = ("group_vars", "host_vars")
CONFIG_ETC = "/etc/ansible/ansible.cfg"


def _memo_key(path: Path) -> tuple[object, ...] | None:
    """Everything ``ansible-inventory``'s answer for ``path`` depends on, for a static inventory
    file (YAML or INI): its bytes, the bytes of every file of the ``group_vars``/``host_vars``
    beside it, the Ansible configuration files Ansible would read and every ``ANSIBLE_*``
    variable. None where the answer may change with none of these (an executable inventory script,
    an inventory plugin's configuration, a directory of sources) or the file cannot be read."""
    try:
        found = path.stat()
        if not stat.S_ISREG(found.st_mode) or found.st_mode & 0o111:
            return None
        content = path.read_bytes()
    except OSError:
        return None
    if _PLUGIN_RE.search(content):
        return None
    configs = [os.environ.get("ANSIBLE_CONFIG", ""), "ansible.cfg", "~/.ansible.cfg", CONFIG_ETC]
    return (
        hashlib.sha256(content).hexdigest(),
        tuple(_tree_digest(path.parent / name) for name in _VARS_DIRS),
        tuple((name, _file_digest(Path(name).expanduser().absolute())) for name in configs if name),
        tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith("ANSIBLE_") or k == "PATH")),
        sys.executable,
    )


def _file_digest(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def _tree_digest(top: Path) -> str | None:
    """One digest of every file's path and bytes under ``top`` (None: no such directory)."""
    if not top.is_dir():
        return None
    digest = hashlib.sha256()
    for root, dirs, files in os.walk(top):
        dirs.sort()
        for name in sorted(files):
            file = Path(root, name)
            digest.update(str(file.relative_to(top)).encode() + b"\0" + (_file_digest(file) or "-").encode())
    return digest.hexdigest()


def _remembered(path: Path, key: tuple[object, ...] | None) -> str | None:
    if key is None:
        return None
    with _MEMO_LOCK:
        found = _MEMO.get(path)
    return found[1] if found is not None and found[0] == key else None


def _remember(path: Path, key: tuple[object, ...] | None, answer: str) -> None:
    """Keep ``answer`` for ``path`` where nothing it depends on changed while it was read."""
    if key is None or _memo_key(path) != key:
        return
    with _MEMO_LOCK:
        _MEMO.pop(path, None)
        _MEMO[path] = (key, answer)
        while len(_MEMO) > _MEMO_MAX:
            _MEMO.pop(next(iter(_MEMO)))


def _ansible_inventory(path: Path) -> dict[str, Any]:
    """``ansible-inventory``'s answer for ``path`` as data: read once per process for a static
    inventory whose files, configuration and environment are unchanged (``_memo_key``), else read
    each time."""
    key = _memo_key(path)
    remembered = _remembered(path, key)
    if remembered is not None:
        _drop_ahead(path)
        kept: dict[str, Any] = json.loads(remembered)
        return kept
    try:
        proc, keepable = _answer(path, key)
    except subprocess.TimeoutExpired as err:
        late = f"ansible-inventory did not answer within {INVENTORY_TIMEOUT_S} s"
        raise ConfigError(str(path), [late]) from err
    if proc.returncode != 0:
        said = _said(proc.stderr)
        raise ConfigError(str(path), [f"ansible-inventory cannot read it: {line}" for line in said])
    try:
        data: dict[str, Any] = json.loads(proc.stdout)
    except ValueError as err:
        raise ConfigError(str(path), [f"ansible-inventory printed no inventory: {err}"]) from err
    if keepable:
        _remember(path, key, proc.stdout)
    return data


def _said(stderr: str) -> list[str]:
    """The lines of ansible-inventory's stderr that say why it failed (each once, shortened)."""
    lines = [line.strip() for line in stderr.splitlines() if _ANSIBLE_SAYS_RE.match(line.strip())]
    lines = list(dict.fromkeys(lines)) or [line.strip() for line in stderr.strip().splitlines()[-3:]]
    return [line[:300] for line in lines] or ["(no message)"]


def _group_hosts(data: dict[str, Any], group: str) -> list[str]:
    entry = data.get(group, {})
    hosts = list(entry.get("hosts", []))
    for child in entry.get("children", []):
        hosts += _group_hosts(data, child)
    return sorted(set(hosts))


def _duplicate_endpoints(hosts: list[str], hostvars: dict[str, Any]) -> list[str]:
    """Hosts that reach the same machine (``ansible_host`` and ``ansible_port``) under two names."""
    by_endpoint: dict[tuple[str, str], list[str]] = defaultdict(list)
    for host in hosts:
        own = hostvars.get(host, {})
        by_endpoint[(str(own.get("ansible_host") or host), str(own.get("ansible_port") or 22))].append(host)
    return [
        f"hosts: {' and '.join(repr(h) for h in names)} are the same host ({address} port {port})"
        for (address, port), names in sorted(by_endpoint.items())
        if len(names) > 1
    ]


def _fabric_name(path: Path, first: dict[str, Any]) -> str:
    for key in ("fabtune_fabric_name", "fabtune_testbed"):
        if first.get(key):
            return check_name(key, str(first[key]))
    return check_name("inventory file name (no fabtune_fabric_name set)", path.stem)


# Hosts per inventory read in this process (absolute path -> count): the Ansible adapter sizes its
# forks from it without reading the inventory again.
_HOST_COUNTS: dict[Path, int] = {}


def host_count(path: Path) -> int | None:
    """How many hosts ``path`` lists, when this process has read it (``read_inventory``)."""
    return _HOST_COUNTS.get(Path(path).absolute())


def read_inventory(path: Path) -> InventoryInfo:
    """Read an inventory through ``ansible-inventory`` (any format Ansible reads).

    The fabric's name is ``fabtune_fabric_name`` (or a testbed's ``fabtune_testbed``), else the
    file's stem; its type is ``fabtune_fabric`` (``roce``/``ib``), else the ``roce``/``ib`` group.
    The path is made absolute first (ansible-runner reads any other string as inventory text).

    Raises:
        ConfigError: when the file is missing, unparsable, empty, lists one host twice, names no
            fabric type, or its fabric name or launcher is invalid.
    """
    path = Path(path).absolute()
    if not path.is_file():
        raise ConfigError("inventory", [f"{path}: no such file"])
    data = _ansible_inventory(path)
    hosts = _group_hosts(data, "all")
    if not hosts:
        raise ConfigError(str(path), ["hosts: the inventory has no hosts"])
    _HOST_COUNTS[path] = len(hosts)
    hostvars = data.get("_meta", {}).get("hostvars", {})
    duplicates = _duplicate_endpoints(hosts, hostvars)
    if duplicates:
        raise ConfigError(str(path), duplicates)
    first = hostvars.get(hosts[0], {})
    name = _fabric_name(path, first)
    fabric = str(first.get("fabtune_fabric") or ("ib" if _group_hosts(data, "ib") else "roce"))
    if fabric not in ("roce", "ib"):
        raise ConfigError(str(path), [f"fabtune_fabric: {fabric!r} must be roce or ib"])
    launcher = first.get("fabtune_launcher", "mpirun")
    if launcher not in LAUNCHERS:
        known = ", ".join(LAUNCHERS)
        raise ConfigError(str(path), [f"fabtune_launcher: {launcher!r} must be one of {known}"])
    ssh_reuse(path, first.get(SSH_REUSE))
    return InventoryInfo(path, name, fabric, tuple(hosts), tuple(_group_hosts(data, "subnet_managers")),
                         str(launcher), first.get("fabtune_oob_interface"),
                         bench_timeout(path, first.get("fabtune_bench_timeout_s")),
                         lossless_class(path, fabric, {h: hostvars.get(h, {}).get(LOSSLESS) for h in hosts}),
                         sm_flavor(path, fabric, {h: hostvars.get(h, {}).get(SM_FLAVOR)
                                                  for h in _group_hosts(data, "subnet_managers")}),
                         _hostvars_of(data, hosts))


def host_vars(path: Path) -> dict[str, dict[str, Any]]:
    """Each host's variables as Ansible resolves them (``ansible-inventory --list``: ``_meta.hostvars``,
    group variables merged; templates are not rendered).

    Raises:
        ConfigError: when ansible-inventory cannot read the file.
    """
    data = _ansible_inventory(Path(path).absolute())
    return _hostvars_of(data, _group_hosts(data, "all"))


def _hostvars_of(data: Mapping[str, Any], hosts: list[str]) -> dict[str, dict[str, Any]]:
    """``hosts``' variables in ansible-inventory's ``--list`` answer (``_meta.hostvars``)."""
    found = data.get("_meta", {}).get("hostvars", {})
    return {h: dict(found.get(h) or {}) for h in hosts}


def hostvars_of(info: InventoryInfo) -> dict[str, dict[str, Any]]:
    """Each host's variables: those ``read_inventory`` found, else read now (:func:`host_vars`)."""
    if info.hostvars is not None:
        return {h: dict(v) for h, v in info.hostvars.items()}
    return host_vars(info.path)


BENCH_TIMEOUT = "fabtune_bench_timeout_s"
MAX_BENCH_TIMEOUT_S = 86400


def bench_timeout(path: Path, value: Any) -> int | None:
    """``fabtune_bench_timeout_s``: seconds, a whole number from 10 to a day; None when not set.

    Raises:
        ConfigError: naming the variable and its value.
    """
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | str) or not str(value).strip().isdigit():
        raise ConfigError(str(path), [f"{BENCH_TIMEOUT}: {value!r} must be a whole number of seconds"])
    seconds = int(value)
    if not 10 <= seconds <= MAX_BENCH_TIMEOUT_S:
        raise ConfigError(str(path), [f"{BENCH_TIMEOUT}: {seconds} must be from 10 to {MAX_BENCH_TIMEOUT_S}"])
    return seconds


SSH_REUSE = "fabtune_mpirun_ssh_reuse"


def ssh_reuse(path: Path, value: Any) -> bool:
    """``fabtune_mpirun_ssh_reuse``: whether a batch's mpirun launches share their SSH connections
    (default true); a boolean as Ansible reads one (``true``/``false``, ``yes``/``no``, ``1``/``0``...),
    refused otherwise: the playbook's ``bool`` filter would read anything else as false.

    Raises:
        ConfigError: naming the variable and its value.
    """
    if value is None:
        return True
    try:
        return bool(boolean(value, strict=True))
    except TypeError:
        raise ConfigError(str(path), [f"{SSH_REUSE}: {value!r} must be true or false"]) from None


LOSSLESS = "fabtune_lossless"
_LOSSLESS_FIELDS = {"priority": 7, "dscp": 63, "cnp_priority": 7, "cnp_dscp": 63}  # field: highest value


def lossless_class(path: Path, fabric: str, declared: dict[str, Any]) -> LosslessClass | None:
    """``fabtune_lossless`` (``{priority: 0-7, dscp: 0-63}``, optionally ``cnp_priority``, ``cnp_dscp``):
    the lossless class the switches run, one for the whole fabric; None when no host declares it.

    Args:
        declared: each host's value of the variable (None where it has none).

    Raises:
        ConfigError: naming the field and its value (a bad value, an unknown or missing field, hosts
            that declare different classes, a class on an InfiniBand fabric).
    """
    value = _one_value(path, declared)
    if value is None:
        return None
    if fabric != "roce":
        raise ConfigError(
            str(path), [f"{LOSSLESS}: {value!r} is for RoCE fabrics; this inventory is {fabric}"]
        )
    if not isinstance(value, dict):
        shape = "must be a mapping {priority: 0-7, dscp: 0-63}"
        raise ConfigError(str(path), [f"{LOSSLESS}: {value!r} {shape}"])
    problems = [
        f"{LOSSLESS}: unknown field {key!r} (fields: {', '.join(_LOSSLESS_FIELDS)})"
        for key in value
        if key not in _LOSSLESS_FIELDS
    ]
    problems += [f"{LOSSLESS}.{key}: missing" for key in ("priority", "dscp") if key not in value]
    numbers = {key: _whole(value[key], top) for key, top in _LOSSLESS_FIELDS.items() if key in value}
    problems += [
        f"{LOSSLESS}.{key}: {value[key]!r} must be a whole number from 0 to {_LOSSLESS_FIELDS[key]}"
        for key, number in numbers.items()
        if number is None
    ]
    if problems:
        raise ConfigError(str(path), problems)
    return _with_cnp_class(path, {k: n for k, n in numbers.items() if n is not None})


SM_FLAVOR = "fabtune_sm_flavor"
SM_FLAVORS = ("upstream", "mlnx")


def sm_flavor(path: Path, fabric: str, declared: dict[str, Any]) -> str | None:
    """``fabtune_sm_flavor`` of the subnet managers: ``upstream`` (opensm as Debian ships it) or
    ``mlnx`` (NVIDIA's SM, whose ``ar_*`` engines give adaptive routing); None when undeclared.

    Raises:
        ConfigError: a value other than those, SM hosts that differ, or a RoCE inventory.
    """
    value = _one_value(path, declared, SM_FLAVOR, "a fabric's subnet managers run one SM")
    if value is None:
        return None
    if fabric != "ib":
        raise ConfigError(str(path), [f"{SM_FLAVOR}: {value!r} is for InfiniBand fabrics; "
                                      f"this inventory is {fabric}"])
    if value not in SM_FLAVORS:
        raise ConfigError(str(path), [f"{SM_FLAVOR}: {value!r} must be one of {', '.join(SM_FLAVORS)}"])
    return str(value)


def _one_value(path: Path, declared: dict[str, Any], var: str = LOSSLESS,
               one: str = "a fabric runs one lossless class") -> Any:
    """The value every host declares (None: no host does); hosts that differ are refused by name."""
    values = {h: v for h, v in declared.items() if v is not None}
    if not values:
        return None
    first = sorted(values)[0]
    value = values[first]
    differ = [h for h in sorted(declared) if declared[h] != value]
    if differ:
        said = ", ".join(f"{h}: {'none' if declared[h] is None else repr(declared[h])}" for h in differ[:3])
        more = f" and {len(differ) - 3} more" if len(differ) > 3 else ""
        raise ConfigError(
            str(path),
            [f"{var}: {first} declares {value!r}, but {said}{more}; {one}"],
        )
    return value


def _whole(value: Any, top: int) -> int | None:
    """``value`` as a whole number from 0 to ``top`` (an int or a string of digits), else None."""
    if isinstance(value, bool) or not isinstance(value, int | str) or not str(value).strip().isdigit():
        return None
    number = int(value)
    return number if number <= top else None


def _with_cnp_class(path: Path, numbers: dict[str, int]) -> LosslessClass:
    """The declared class with the CNPs' own: priority 6 (7 when the data is on 6), DSCP 48 (CS6),
    unless declared; CNPs in the data class are refused."""
    prio, dscp = numbers["priority"], numbers["dscp"]
    cnp_prio = numbers.get("cnp_priority", 7 if prio == 6 else 6)
    cnp_dscp = numbers.get("cnp_dscp", 48)
    problems = [
        f"{LOSSLESS}.{cnp}: {got} is the lossless class's {data} too: CNPs would queue behind the "
        f"traffic they throttle (declare {cnp} apart from {data})"
        for cnp, got, data, used in (
            ("cnp_priority", cnp_prio, "priority", prio),
            ("cnp_dscp", cnp_dscp, "dscp", dscp),
        )
        if got == used
    ]
    if problems:
        raise ConfigError(str(path), problems)
    return LosslessClass(prio, dscp, cnp_prio, cnp_dscp)
