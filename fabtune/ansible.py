"""The one adapter over ansible-runner.

Every Ansible run of fabtune goes through :func:`run_playbook`, :func:`run_playbooks` (several
playbooks in one run, an outcome each) or :func:`run_module`: typed arguments, a private data
directory per run with its artifacts kept, and an outcome read from runner status, stats and
events, never from stdout text.

Observers (:func:`observing`) see each run as it goes: every task result as its event arrives, and
the outcome with its artifact directory when the run ends. The CLI's ``-v`` prints the task stream
through one; the journal links each run's artifact directories to the fabtune run through another.
With no observer a run is exactly what it is without them.
"""

from __future__ import annotations

import bisect
import configparser
import contextlib
import dataclasses
import functools
import hashlib
import importlib.util
import itertools
import json
import os
import shlex
import shutil
import signal
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import ansible_runner
import psutil
import yaml

from fabtune import collection
from fabtune.errors import ConfigError, PlaybookFailed
from fabtune.inventory import STRICT_INVENTORY_ENV, host_count
from fabtune.paths import private_dir, under_home

# Where the collection lies (fabtune.collection), named here too: the adapter's callers know it here.
CONTENT_ROOT = collection.CONTENT_ROOT
COLLECTIONS = collection.COLLECTIONS
COLLECTION = collection.COLLECTION
PLAYBOOKS = collection.PLAYBOOKS
ROLES = collection.ROLES
PROFILES = collection.PROFILES
MODULE_UTILS = collection.MODULE_UTILS
# fabtune's ansible.cfg (only settings with no environment variable), for runs whose caller has none.
DEFAULT_CONFIG = CONTENT_ROOT / "ansible.cfg"
# Ansible's own default collection paths, kept after this repository's (as ansible.cfg does).
DEFAULT_COLLECTIONS_PATH = ("~/.ansible/collections", "/usr/share/ansible/collections")
KEPT_EVENTS = frozenset({
    "runner_on_ok", "runner_on_failed", "runner_on_unreachable", "runner_on_skipped",
    "runner_item_on_ok", "runner_item_on_failed",
})
TaskCallback = Callable[["TaskResult"], None]
# Deadlines. Every task of a fabtune run times out after TASK_TIMEOUT_S (ANSIBLE_TASK_TIMEOUT; the
# caller's own value wins; benchmark tasks set their own), and every run after its ``timeout_s``
# (ansible-runner kills the ansible-playbook process group; the outcome's status is "timeout").
TASK_TIMEOUT_S = 600
RUN_TIMEOUT_S = 3600
# Parallel hosts: one fork per host of the inventory (as this process read it), at most MAX_FORKS
# (each fork is a Python process of some tens of MB on the controller); FABTUNE_FORKS sets it.
FORKS_ENV = "FABTUNE_FORKS"
MAX_FORKS = 128
UNKNOWN_INVENTORY_FORKS = 32


def forks_for(inventory: Path) -> int:
    """Ansible's forks for a run on ``inventory``: FABTUNE_FORKS, else its host count, capped.

    Raises:
        ConfigError: when FABTUNE_FORKS is not a whole number from 1 to 1000.
    """
    raw = os.environ.get(FORKS_ENV)
    if raw:
        if not raw.strip().isdigit() or not 1 <= int(raw) <= 1000:
            raise ConfigError(FORKS_ENV, [f"{raw!r} must be a whole number from 1 to 1000"])
        return int(raw)
    hosts = host_count(inventory)
    return UNKNOWN_INVENTORY_FORKS if hosts is None else max(1, min(hosts, MAX_FORKS))


@dataclass(frozen=True)
class TaskResult:
    """One host's result of one task, from a runner event."""

    host: str
    task: str
    action: str
    event: str
    changed: bool
    result: Mapping[str, Any]

    @property
    def failed(self) -> bool:
        return self.event in ("runner_on_failed", "runner_item_on_failed", "runner_on_unreachable")

    @property
    def module(self) -> str:
        """The module that ran, without its collection (``fabric_facts``): a stable key of the
        task's result, whatever the task is named."""
        return self.action.rsplit(".", 1)[-1]


@dataclass(frozen=True)
class RunOutcome:
    """What an Ansible run did, per host."""

    status: str
    rc: int
    stats: Mapping[str, Mapping[str, int]]
    tasks: tuple[TaskResult, ...] = field(repr=False)
    artifact_dir: Path
    seconds: float = 0.0  # a part's of a longer run (``run_playbooks``): from its first play's start

    @property
    def ok(self) -> bool:
        return self.status == "successful" and not self.failed_hosts and not self.unreachable_hosts

    @property
    def failed_hosts(self) -> list[str]:
        return sorted(self.stats.get("failures", {}))

    @property
    def unreachable_hosts(self) -> list[str]:
        return sorted(self.stats.get("dark", {}))

    def changed_count(self, host: str) -> int:
        return int(self.stats.get("changed", {}).get(host, 0))

    def results(self, task: str) -> dict[str, Mapping[str, Any]]:
        """Per host, the result of the task named ``task`` (its last occurrence)."""
        return {t.host: t.result for t in self.tasks if t.task == task}

    def module_results(self, module: str) -> dict[str, Mapping[str, Any]]:
        """Per host, the result of the last task that ran ``module`` (``fabric_facts``): for a
        playbook where one task runs it, a key that renaming the task does not break."""
        return {t.host: t.result for t in self.tasks if t.module == module}

    def failures(self) -> list[TaskResult]:
        return [t for t in self.tasks if t.failed]

    def raise_for_failure(self, what: str) -> RunOutcome:
        """Raise PlaybookFailed naming each failed or unreachable host and why."""
        if self.ok:
            return self
        if self.status == "timeout":
            raise PlaybookFailed(
                f"{what} failed: the Ansible run did not finish within its deadline and was stopped "
                f"(artifacts: {self.artifact_dir})"
            )
        reasons = [f"{t.host}: {t.task}: {_message(t.result)}" for t in self.failures()]
        detail = "; ".join(reasons) or f"runner status {self.status}, rc {self.rc}"
        raise PlaybookFailed(f"{what} failed: {detail} (artifacts: {self.artifact_dir})")


def combine(outcomes: Sequence[RunOutcome]) -> RunOutcome:
    """Several runs over disjoint hosts as one outcome: the first unsuccessful status (else
    ``successful``), the highest rc, every host's stats and tasks, the last run's artifacts."""
    status = next((o.status for o in outcomes if o.status != "successful"), "successful")
    stats: dict[str, dict[str, int]] = {}
    for outcome in outcomes:
        for key, per_host in outcome.stats.items():
            stats.setdefault(key, {}).update(per_host)
    return RunOutcome(
        status=status, rc=max(o.rc for o in outcomes), stats=stats,
        tasks=tuple(t for o in outcomes for t in o.tasks), artifact_dir=outcomes[-1].artifact_dir,
    )


class Observer(Protocol):
    """Something that watches Ansible runs: ``kind`` is the playbook's stem or the module's name."""

    def task(self, kind: str, result: TaskResult) -> None:
        """One host's result of one task, as its runner event arrives."""

    def finished(self, kind: str, outcome: RunOutcome) -> None:
        """The run ended (any status); ``outcome.artifact_dir`` holds its artifacts."""


_OBSERVERS: list[Observer] = []
_OBSERVERS_LOCK = threading.Lock()


def add_observer(observer: Observer) -> None:
    """Let ``observer`` watch every Ansible run that starts from now on, in any thread."""
    with _OBSERVERS_LOCK:
        _OBSERVERS.append(observer)


def remove_observer(observer: Observer) -> None:
    """Stop ``observer`` watching new runs (no error when it was not watching)."""
    with _OBSERVERS_LOCK:
        if observer in _OBSERVERS:
            _OBSERVERS.remove(observer)


@contextmanager
def observing(observer: Observer) -> Iterator[Observer]:
    """``observer`` watches the runs started inside the block."""
    add_observer(observer)
    try:
        yield observer
    finally:
        remove_observer(observer)


def _observers() -> tuple[Observer, ...]:
    with _OBSERVERS_LOCK:
        return tuple(_OBSERVERS)


def _message(result: Mapping[str, Any]) -> str:
    msg = result.get("msg") or result.get("stderr") or result.get("module_stderr") or "failed"
    return str(msg).strip().splitlines()[0][:300] if str(msg).strip() else "failed"


# An optional accelerator for every run: FABTUNE_ACCELERATOR=mitogen runs the plays with mitogen's
# strategy (the "mitogen" extra: pip install 'fabtune[mitogen]'), enabled as its documentation says:
# ANSIBLE_STRATEGY_PLUGINS at ansible_mitogen's strategy plugins, ANSIBLE_STRATEGY=mitogen_linear.
ACCELERATOR_ENV = "FABTUNE_ACCELERATOR"
ACCELERATORS = ("none", "mitogen")


def accelerator_env() -> dict[str, str]:
    """The Ansible settings of FABTUNE_ACCELERATOR (none: nothing).

    Raises:
        ConfigError: an unknown accelerator, or mitogen asked for and not installed.
    """
    raw = os.environ.get(ACCELERATOR_ENV, "").strip()
    if raw in ("", "none"):
        return {}
    if raw != "mitogen":
        known = ", ".join(ACCELERATORS)
        raise ConfigError(ACCELERATOR_ENV, [f"{raw!r} is not an accelerator (known: {known})"])
    try:
        import ansible_mitogen  # type: ignore[import-not-found,import-untyped,unused-ignore]  # an optional extra
    except ImportError:
        why = "'mitogen' needs the mitogen extra: pip install 'fabtune[mitogen]'"
        raise ConfigError(ACCELERATOR_ENV, [why]) from None
    plugins = Path(ansible_mitogen.__file__).parent / "plugins" / "strategy"
    return {"ANSIBLE_STRATEGY_PLUGINS": str(plugins), "ANSIBLE_STRATEGY": "mitogen_linear"}


def _private_dir(kind: str) -> tuple[Path, str]:
    base = private_dir(under_home("ansible"))
    return base, f"{time.strftime('%Y%m%dT%H%M%S')}-{kind}-{uuid.uuid4().hex[:6]}"


def _collections_path() -> str:
    """fabtune's own collection, then the caller's ANSIBLE_COLLECTIONS_PATH or Ansible's default."""
    rest = os.environ.get("ANSIBLE_COLLECTIONS_PATH") or os.pathsep.join(DEFAULT_COLLECTIONS_PATH)
    return os.pathsep.join([str(COLLECTIONS), rest])


# The caller's ssh_args (Ansible's own where none are given) plus keepalives: a management
# connection that stops answering is dropped after 30 s and retried (reconnection_retries) instead
# of holding a play forever.
KEEPALIVE_INTERVAL_S = 10
KEEPALIVE_COUNT = 3
KEEPALIVES = {"ServerAliveInterval": KEEPALIVE_INTERVAL_S, "ServerAliveCountMax": KEEPALIVE_COUNT}
ANSIBLE_SSH_ARGS = "-C -o ControlMaster=auto -o ControlPersist=60s"  # the ssh connection's default
SSH_ARGS = " ".join([ANSIBLE_SSH_ARGS, *(f"-o {k}={v}" for k, v in KEEPALIVES.items())])


def ssh_args() -> str:
    """The ``ANSIBLE_SSH_ARGS`` of every run: the caller's own ssh_args (``ANSIBLE_SSH_ARGS``, else
    the ``[ssh_connection]`` ``ssh_args`` of the configuration file Ansible reads), else Ansible's
    default, then those of fabtune's keepalives they do not set (ssh takes an option's first value:
    a keepalive the caller's ssh_args set is theirs; one set only in an ssh_config file is
    fabtune's, the command line coming first)."""
    given = os.environ.get("ANSIBLE_SSH_ARGS")
    if given is None:
        given = _configured("ssh_connection", ("ssh_args",))
    own = ANSIBLE_SSH_ARGS if given is None else given.strip()
    said = own.lower()
    added = [f"-o {k}={v}" for k, v in KEEPALIVES.items() if k.lower() not in said]
    return " ".join([own, *added]).strip()


def accelerator_vars() -> dict[str, int]:
    """The variables every run passes for FABTUNE_ACCELERATOR (none: nothing).

    mitogen opens its own SSH connections with its own keepalives (ServerAliveInterval 30 s,
    ServerAliveCountMax 10: a host that stops answering is found after 300 s) ahead of ssh_args, so
    fabtune's keepalives above would not apply: its ``mitogen_ssh_keepalive_*`` variables set the
    same 30 s instead (ansible_mitogen/connection.py, ``_connect_ssh``).
    """
    if not accelerator_env():
        return {}
    return {"mitogen_ssh_keepalive_interval": KEEPALIVE_INTERVAL_S,
            "mitogen_ssh_keepalive_count": KEEPALIVE_COUNT}


MODULE_CACHE_ENV = "FABTUNE_MODULE_CACHE"
MODULE_CACHE_CALLBACK = "fabtune.fabric.module_cache"


@functools.cache
def module_cache_key() -> str:
    """What the modules' payloads are built from: ansible-core's version, the controller Python's
    bytecode format (the callback adds bytecode to each payload) and the content
    of the collection's modules and module_utils (a change to any of them names another cache)."""
    from ansible.release import __version__ as core  # loaded only where a run starts

    digest = hashlib.sha256(core.encode() + b"\0" + importlib.util.MAGIC_NUMBER)
    plugins = COLLECTIONS / "ansible_collections" / "fabtune" / "fabric" / "plugins"
    for path in sorted(p for d in ("modules", "module_utils") for p in (plugins / d).glob("*.py")):
        digest.update(f"{path.parent.name}/{path.name}\0".encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:20]


def module_cache_env() -> dict[str, str]:
    """Where the modules' AnsiballZ payloads outlive a run (the callback ``module_cache`` of the
    collection points each run's build directory there), and the callbacks enabled with it: the
    caller's own (``ANSIBLE_CALLBACKS_ENABLED``, else its ansible.cfg's ``callbacks_enabled``) are kept."""
    cache = _module_cache_dir()
    enabled = [c.strip() for c in _callbacks_enabled().split(",") if c.strip()]
    if MODULE_CACHE_CALLBACK not in enabled:
        enabled.append(MODULE_CACHE_CALLBACK)
    return {MODULE_CACHE_ENV: str(cache), "ANSIBLE_CALLBACKS_ENABLED": ",".join(enabled)}


MODULE_CACHES_KEPT = 3  # the payload directories of the versions used last (one per version)


def _module_cache_dir() -> Path:
    """This version's payload directory, marked as used now; the directories of the versions used
    before the last ``MODULE_CACHES_KEPT`` (by when each was last used) are removed."""
    base = private_dir(under_home("ansible") / "modules")
    cache = private_dir(base / module_cache_key())
    os.utime(cache)
    used = sorted((p for p in base.iterdir() if p.is_dir() and not p.is_symlink()),
                  key=lambda p: p.stat().st_mtime, reverse=True)
    for stale in used[MODULE_CACHES_KEPT:]:
        if stale != cache:
            shutil.rmtree(stale, ignore_errors=True)
    return cache


def _callbacks_enabled() -> str:
    """The callbacks the caller enabled: ``ANSIBLE_CALLBACKS_ENABLED``, else those of the
    configuration file Ansible reads (fabtune's own enables none)."""
    given = os.environ.get("ANSIBLE_CALLBACKS_ENABLED")
    if given is not None:
        return given
    return _configured("defaults", ("callbacks_enabled", "callback_whitelist")) or ""


def _configured(section: str, keys: Sequence[str]) -> str | None:
    """The first of ``keys`` in ``section`` of the caller's configuration file, the one Ansible
    reads (None: no such file, no such key, or a file Ansible itself will say is broken), unquoted
    as Ansible unquotes an ini value."""
    from ansible.config.manager import find_ini_config_file
    from ansible.parsing.quoting import unquote

    found = find_ini_config_file()
    if not found:
        return None
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read(found)
    except configparser.Error:
        return None
    for key in keys:
        if parser.has_option(section, key):
            return str(unquote(parser.get(section, key)))
    return None


def config_env() -> dict[str, str]:
    """``ANSIBLE_CONFIG`` at fabtune's own ansible.cfg (:data:`DEFAULT_CONFIG`) where Ansible would
    find no configuration file of the caller's; nothing where it would.

    Ansible reads one file, the first of ``ANSIBLE_CONFIG``, ``./ansible.cfg`` (unless the working
    directory is world-writable), ``~/.ansible.cfg`` and ``/etc/ansible/ansible.cfg``, and
    ansible-runner starts ansible-playbook in this process's working directory: the question is
    asked here, by Ansible's own lookup, for every run. A caller's file is used whole, never merged.
    """
    from ansible.config.manager import find_ini_config_file  # loaded only where a run starts

    return {} if find_ini_config_file() else {"ANSIBLE_CONFIG": str(DEFAULT_CONFIG)}


def _envvars() -> dict[str, str]:
    return {
        "ANSIBLE_SSH_ARGS": ssh_args(),
        "ANSIBLE_SSH_RETRIES": "3",
        "ANSIBLE_TASK_TIMEOUT": os.environ.get("ANSIBLE_TASK_TIMEOUT") or str(TASK_TIMEOUT_S),
        "ANSIBLE_COLLECTIONS_PATH": _collections_path(),
        "ANSIBLE_HOST_KEY_CHECKING": "True",
        "ANSIBLE_PIPELINING": "True",
        "ANSIBLE_RETRY_FILES_ENABLED": "False",
        "ANSIBLE_NOCOLOR": "True",
        "ANSIBLE_STDOUT_CALLBACK": "default",
        "PATH": _path(),
        **STRICT_INVENTORY_ENV,
        **accelerator_env(),
        **config_env(),
        **module_cache_env(),
    }


class _Collector:
    """Keeps the task results of a run (cheap handler; drops nothing from the artifacts)."""

    def __init__(
        self, on_task: TaskCallback | None, kind: str = "", observers: Sequence[Observer] = ()
    ) -> None:
        self.tasks: list[TaskResult] = []
        self.on_task = on_task
        self.kind = kind
        self.observers = tuple(observers)
        self.pid: int | None = None  # ansible-playbook's (every event carries it)
        self.plays: list[str] = []  # each play's uuid, in the order the plays started
        self.play_started: list[float] = []  # when each play started (time.monotonic)
        self.task_plays: list[int] = []  # per kept task result, the index of its play in ``plays``

    def __call__(self, event: Mapping[str, Any]) -> bool:
        if self.pid is None and isinstance(event.get("pid"), int):
            self.pid = int(event["pid"])
        name = event.get("event", "")
        if name == "playbook_on_play_start":
            self.plays.append(str(event.get("event_data", {}).get("play_uuid", "")))
            self.play_started.append(time.monotonic())
        if name in KEPT_EVENTS:
            data = event.get("event_data", {})
            self.task_plays.append(len(self.plays) - 1)
            res = data.get("res", {}) or {}
            task = TaskResult(
                host=str(data.get("host", "")), task=str(data.get("task", "")),
                action=str(data.get("task_action", "")), event=name,
                changed=bool(res.get("changed", False)), result=res,
            )
            self.tasks.append(task)
            if self.on_task is not None:
                self.on_task(task)
            for observer in self.observers:
                observer.task(self.kind, task)
        return True


def _path() -> str:
    """PATH with this Python's bin directory first, so the venv's Ansible runs."""
    return os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", os.defpath)])


def _absolute(inventory: Path) -> str:
    """The inventory as an absolute path: ansible-runner takes any other string as inline inventory text.

    Raises:
        ConfigError: when ``inventory`` is relative (the caller must resolve it first).
    """
    if not Path(inventory).is_absolute():
        raise ConfigError("inventory", [f"inventory: {str(inventory)!r} must be an absolute path"])
    return str(inventory)


def _run(kind: str, on_task: TaskCallback | None, timeout_s: int, *, collector: _Collector | None = None,
         parts: Sequence[Part] = (), **kwargs: Any) -> RunOutcome:
    private, ident = _private_dir(kind)
    observers = _observers()
    collector = collector or _Collector(on_task, kind, observers)
    extravars = {**accelerator_vars(), **(kwargs.pop("extravars", None) or {})}
    varfile = _extravars_file(private, ident, extravars) if extravars else None
    if varfile is not None:
        flags = [f"-e @{shlex.quote(str(varfile))}", kwargs.get("cmdline")]
        kwargs["cmdline"] = " ".join(f for f in flags if f)
    wrapper = _wrapper_file(private, ident, parts) if parts else None
    if wrapper is not None:
        kwargs["playbook"] = str(wrapper)
    with _stoppable(lambda: collector.pid, timeout_s) as stop:
        try:
            runner = ansible_runner.run(
                private_data_dir=str(private), ident=ident, quiet=True, rotate_artifacts=200,
                envvars=_envvars(), event_handler=collector, suppress_env_files=True,
                timeout=timeout_s + BACKSTOP_S, cancel_callback=stop.cancelled, **kwargs,
            )
        finally:
            for written in (varfile, wrapper):
                if written is not None:
                    written.unlink(missing_ok=True)
    outcome = RunOutcome(
        status="timeout" if stop.timed_out else str(runner.status), rc=int(runner.rc),
        stats=runner.stats or {}, tasks=tuple(collector.tasks), artifact_dir=Path(runner.config.artifact_dir),
    )
    for observer in observers:
        observer.finished(kind, outcome)
    return outcome


INTERRUPTS = (signal.SIGINT, signal.SIGTERM)
BACKSTOP_S = 60
"""ansible-runner's own timeout, past the run's deadline: only if the cancel callback is not polled."""


class _Stop:
    """When an Ansible run must stop: a signal (Ctrl-C, SIGTERM) or its deadline.

    Given no cancel callback, ansible-runner installs its own SIGINT and SIGTERM handlers and never
    puts the previous ones back: after the first playbook, Ctrl-C and SIGTERM would only cancel the
    playbook running at that moment and be ignored between playbooks. And both its cancel and its
    timeout kill only ansible-playbook's process group, while its workers run in sessions of their
    own: a worker went on with the task it ran (an apply on a host) after fabtune had moved on.
    Here the run is stopped by :meth:`cancelled`, which stops ansible-playbook and every process
    under it first (:func:`_stop_tree`).
    """

    def __init__(self, root: Callable[[], int | None], timeout_s: int) -> None:
        self.root = root
        self.deadline = time.monotonic() + timeout_s
        self.signals: list[int] = []
        self.timed_out = False
        self.stopped = False

    def record(self, signum: int, _frame: object) -> None:
        self.signals.append(signum)

    def cancelled(self) -> bool:
        """ansible-runner's cancel callback (polled while the run lasts)."""
        if not self.signals and time.monotonic() > self.deadline:
            self.timed_out = True
        if (self.signals or self.timed_out) and not self.stopped:
            self.stopped = True
            _stop_tree(self.root())
        return self.stopped


@contextmanager
def _stoppable(root: Callable[[], int | None], timeout_s: int) -> Iterator[_Stop]:
    """A run's :class:`_Stop`; signals are recorded while the run lasts, and once it has returned
    the previous handlers are back and the first signal is raised again: KeyboardInterrupt, the
    CLI's Terminated, or the default action."""
    stop = _Stop(root, timeout_s)
    if threading.current_thread() is not threading.main_thread():  # signals reach the main thread
        yield stop
        return
    previous = {sig: signal.getsignal(sig) for sig in INTERRUPTS}
    for sig in INTERRUPTS:
        signal.signal(sig, stop.record)
    try:
        yield stop
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
    if stop.signals:
        signal.raise_signal(stop.signals[0])


def _stop_tree(pid: int | None, grace_s: float = 5.0) -> None:
    """SIGTERM to ansible-playbook and every process under it, SIGKILL to those left after
    ``grace_s``. Its workers run in sessions of their own, out of reach of ansible-runner's kill of
    the process group: left alone, a worker would finish the task it runs (an apply on a host)
    while fabtune goes on as if it had stopped."""
    if pid is None:
        return
    try:
        top = psutil.Process(pid)
        under = top.children(recursive=True)
    except psutil.Error:
        return
    for proc in [*under, top]:
        with contextlib.suppress(psutil.Error):
            proc.terminate()
    # Only the processes under it are waited for: ansible-playbook itself is ansible-runner's child
    # (pexpect reaps it, and kills its process group once the cancel is seen).
    _gone, alive = psutil.wait_procs(under, timeout=grace_s)
    for proc in alive:
        with contextlib.suppress(psutil.Error):
            proc.kill()


def recorded(kind: str, tasks: Sequence[TaskResult]) -> RunOutcome:
    """The outcome of host work done outside Ansible (``fabtune.sshdirect``), shaped as a run's: a
    failed task fails its host (``stats``), an unreachable one is ``dark``; the results are kept as
    ``results.json`` in an artifact directory of their own under the home, and the observers see it
    (the journal links it) like any run of ``kind``."""
    private, ident = _private_dir(kind)
    artifacts = private_dir(private / "artifacts" / ident)
    (artifacts / "results.json").write_text(json.dumps([dataclasses.asdict(t) for t in tasks], indent=1))
    stats: dict[str, dict[str, int]] = {"ok": {}, "changed": {}, "failures": {}, "dark": {}}
    for t in tasks:
        key = {"runner_on_failed": "failures", "runner_on_unreachable": "dark"}.get(t.event, "ok")
        stats[key][t.host] = stats[key].get(t.host, 0) + 1
        if t.changed:
            stats["changed"][t.host] = stats["changed"].get(t.host, 0) + 1
    failed = any(t.failed for t in tasks)
    outcome = RunOutcome(status="failed" if failed else "successful", rc=2 if failed else 0,
                         stats=stats, tasks=tuple(tasks), artifact_dir=artifacts)
    for observer in _observers():
        for task in tasks:
            observer.task(kind, task)
        observer.finished(kind, outcome)
    return outcome


def _extravars_file(private: Path, ident: str, extravars: Mapping[str, Any]) -> Path:
    """Write a run's extra vars to a private file for ``-e @FILE``.

    On the command line (ansible-runner's way with ``extravars=``) the desired state of a large
    rack is megabytes, past the kernel's argument limit, and readable by every user in ``ps``.
    """
    path = private_dir(private / "extravars") / f"{ident}.json"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as out:
        json.dump(extravars, out)
    return path


@dataclass(frozen=True)
class Part:
    """One playbook of a run of several (:func:`run_playbooks`): a name under ``playbooks/``, and
    the variables its plays get (the import's ``vars``: above the inventory's, below extra vars)."""

    playbook: str
    variables: Mapping[str, Any] = field(default_factory=dict)
    tags: tuple[str, ...] = ()  # the import's tags (``always``: it runs whatever the run's --tags)

    @property
    def path(self) -> Path:
        return PLAYBOOKS / self.playbook


def _wrapper_file(private: Path, ident: str, parts: Sequence[Part]) -> Path:
    """A private playbook that imports each part's playbook with its variables (JSON, which YAML
    reads): like the extra vars file, never the command line, removed when the run ends."""
    plays = [{"ansible.builtin.import_playbook": str(part.path), "vars": dict(part.variables),
              **({"tags": list(part.tags)} if part.tags else {})} for part in parts]
    path = private_dir(private / "extravars") / f"{ident}.playbook.yml"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as out:
        json.dump(plays, out)
    return path


def _play_count(part: Part) -> int:
    """How many plays a part's playbook has (fabtune's playbooks import none)."""
    plays = yaml.safe_load(part.path.read_text())
    return len(plays) if isinstance(plays, list) else 0


def _part_outcome(
    run: RunOutcome, tasks: Sequence[TaskResult], *, lost: Mapping[str, Mapping[str, int]], complete: bool,
    seconds: float,
) -> RunOutcome:
    """One part's outcome: its own tasks; its hosts failed or unreachable there or in an earlier part
    (Ansible runs no later play on them); ``complete``: the run went past it, or ended by itself."""
    stats: dict[str, dict[str, int]] = {key: dict(lost.get(key, {})) for key in ("failures", "dark")}
    stats["ok"], stats["changed"] = {}, {}
    for task in tasks:
        key = "dark" if task.event == "runner_on_unreachable" else "failures" if task.failed else "ok"
        stats[key][task.host] = stats[key].get(task.host, 0) + 1
        if task.changed:
            stats["changed"][task.host] = stats["changed"].get(task.host, 0) + 1
    failed = bool(stats["failures"] or stats["dark"])
    status = "failed" if failed else "successful" if complete else run.status
    rc = 0 if status == "successful" else run.rc or 2
    return RunOutcome(status, rc, stats, tuple(tasks), run.artifact_dir, seconds)


def run_playbooks(
    parts: Sequence[Part],
    inventory: Path,
    *,
    extravars: Mapping[str, Any] | None = None,
    tags: Sequence[str] = (),
    on_task: TaskCallback | None = None,
    timeout_s: int = RUN_TIMEOUT_S,
) -> list[RunOutcome]:
    """Run several playbooks one after another in one ansible-playbook run: one start-up (about a
    second of imports, inventory and collection loading) for all of them.

    Each part's plays get its own variables, so two parts may give the same variable different
    values (two pair rounds); ``extravars`` (a private file, as ``run_playbook``'s) and ``tags``
    are the whole run's. Returns one outcome per part, holding that part's task results: a
    host that failed or was unreachable in a part is so in every later part too (Ansible runs no
    later play on it), and a part the run never finished has the run's status (``timeout``).

    Raises:
        ConfigError: when ``inventory`` is not an absolute path.
    """
    inventory_path = _absolute(inventory)
    kind = "+".join(Path(part.playbook).stem for part in parts)
    collector = _Collector(on_task, kind, _observers())
    flags = f"--tags={','.join(tags)}" if tags else None
    run = _run(kind, on_task, timeout_s, collector=collector, parts=parts, inventory=inventory_path,
               extravars=dict(extravars or {}), forks=forks_for(Path(inventory_path)), cmdline=flags)
    ended_at = time.monotonic()
    counts = [_play_count(part) for part in parts]
    bounds = list(itertools.accumulate(counts))
    started = [*collector.play_started, *[ended_at] * (bounds[-1] + 1 - len(collector.play_started))]
    mine: list[list[TaskResult]] = [[] for _ in parts]
    for task, play in zip(run.tasks, collector.task_plays, strict=True):
        mine[min(bisect.bisect_right(bounds, play), len(parts) - 1)].append(task)
    reached = bisect.bisect_right(bounds, len(collector.plays) - 1)  # the part the last play started in
    # a run that failed with no task failed stopped on something else (a play's hosts, a syntax
    # error): the part it stopped in, and every later one, did not run through
    ended = run.status == "successful" or (run.status == "failed" and any(t.failed for t in run.tasks))
    found: list[RunOutcome] = []
    lost: dict[str, dict[str, int]] = {"failures": {}, "dark": {}}
    for index, tasks in enumerate(mine):
        complete = index < reached or ended
        first = bounds[index] - counts[index]  # the part's first play, then the next part's
        seconds = max(0.0, min(started[bounds[index]], ended_at) - started[first])
        outcome = _part_outcome(run, tasks, lost=lost, complete=complete, seconds=seconds)
        for key in ("failures", "dark"):
            lost[key].update(outcome.stats[key])
        found.append(outcome)
    return found


def run_playbook(
    playbook: str | Path,
    inventory: Path,
    *,
    extravars: Mapping[str, Any] | None = None,
    limit: str | None = None,
    check: bool = False,
    diff: bool = False,
    forks: int | None = None,
    tags: Sequence[str] = (),
    on_task: TaskCallback | None = None,
    timeout_s: int = RUN_TIMEOUT_S,
) -> RunOutcome:
    """Run a playbook (a name under ``playbooks/`` or a path) against ``inventory``.

    Args:
        playbook: ``facts.yml`` style name in the project's playbooks, or a path.
        inventory: the inventory file (an absolute path).
        extravars: variables passed with ``-e @FILE`` (the desired state, typically): a private
            file for the run's duration, never the command line.
        limit: a host pattern to restrict the run.
        check: run in check mode.
        diff: report diffs.
        forks: parallel hosts (default: ``forks_for(inventory)``).
        tags: only run tasks with these tags.
        on_task: called with each task result as it arrives (for progress).
        timeout_s: the whole run's deadline; past it the run is stopped (status ``timeout``).

    Returns:
        The outcome; callers decide whether a failure is fatal (``raise_for_failure``).

    Raises:
        ConfigError: when ``inventory`` is not an absolute path.
    """
    path = Path(playbook) if Path(playbook).is_absolute() else PLAYBOOKS / playbook
    inventory_path = _absolute(inventory)
    flags = [f for f, on in (("--check", check), ("--diff", diff)) if on]
    if tags:
        flags.append(f"--tags={','.join(tags)}")
    return _run(
        path.stem, on_task, timeout_s, playbook=str(path), inventory=inventory_path,
        extravars=dict(extravars or {}), limit=limit, forks=forks or forks_for(Path(inventory_path)),
        cmdline=" ".join(flags) or None,
    )


def run_module(
    module: str,
    args: str | Mapping[str, Any],
    inventory: Path,
    pattern: str = "all",
    *,
    forks: int | None = None,
    timeout_s: int = RUN_TIMEOUT_S,
) -> RunOutcome:
    """Run one module ad hoc on ``pattern`` (``ansible.builtin.ping`` for reachability)."""
    inventory_path = _absolute(inventory)
    module_args = args if isinstance(args, str) else " ".join(f"{k}={v}" for k, v in args.items())
    return _run(
        module.rsplit(".", 1)[-1], None, timeout_s, module=module, module_args=module_args or None,
        host_pattern=pattern, inventory=inventory_path, forks=forks or forks_for(Path(inventory_path)),
    )
