# Copyright: fabtune contributors
# Apache License 2.0 (see LICENSE in this collection or https://www.apache.org/licenses/LICENSE-2.0)
"""Apply a desired NIC and NCCL state on this host, and the commit-confirmed revert built on it.

The write half of the fabric modules as plain functions: the QoS apply of ``fabric_qos`` (read with
``mlnx_qos``/``dcb``, diff, write in a safe order: all in ``fabric_qos_backend``), the sysfs and
configfs writes of ``fabric_sysfs`` (knob paths from ``fabric_host``, plan, mkdir of the rdma_cm
configfs group, write, read back) and the ``/etc/nccl.conf`` of ``nccl_env``. ``fabtune-revert``
(installed by the ``fabric_revert`` role with these files in ``/usr/local/lib/fabtune``) applies a
saved snapshot with them, so a revert is the same code as an apply: no separate undo code.

Commit-confirmed (module ``fabtune.fabric.fabric_revert`` arms, ``fabtune-revert`` fires):
``STATE_DIR/<run_id>.json`` (0600) holds the snapshot, the deadline and the managed files' bytes as
they were when armed; the transient timer ``fabtune-revert-<run_id>.timer`` runs
``fabtune-revert <run_id>`` at the deadline, which applies the snapshot and renames the record to
``<run_id>.reverted.json`` (``<run_id>.revert-failed.json`` when something could not be put back).
Confirming stops the timer and removes the record. The first arming of a run also writes
``<run_id>.prerun.json`` (0600): that snapshot is the host's state before the run changed anything,
kept after confirmation (the last ``PRERUN_KEPT`` runs) so a run can be rolled back from the hosts
alone (``fabtune rollback RUN -i INV --from-hosts``) when the controller's journal is lost. One lock
(``STATE_DIR/.lock``) orders the revert, arming and confirming, so a confirm never races a revert
half-way.

Importable as ``ansible_collections.fabtune.fabric.plugins.module_utils.fabric_apply`` (the
collection's modules; Ansible ships it and the module_utils it imports with each module) or as
plain ``fabric_apply`` from ``/usr/local/lib/fabtune`` (the revert script: the fabric_revert role
copies the four files there, no Ansible on the path; the ``except ImportError`` branch below).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

try:
    from ansible_collections.fabtune.fabric.plugins.module_utils.fabric_desired import QOS_KNOBS, validate
    from ansible_collections.fabtune.fabric.plugins.module_utils.fabric_formats import parse_nccl_conf
    from ansible_collections.fabtune.fabric.plugins.module_utils.fabric_host import (
        cc_knob_paths,
        netdev_split,
        port_of,
        tos_knob_paths,
    )
    from ansible_collections.fabtune.fabric.plugins.module_utils.fabric_host import path as host_path
    from ansible_collections.fabtune.fabric.plugins.module_utils.fabric_qos_backend import (
        QosError,
        diff_state,
        parse,
        read_argvs,
        write_argvs,
    )
except ImportError:  # /usr/local/lib/fabtune beside fabtune-revert (mypy checks the names above)
    from fabric_desired import QOS_KNOBS, validate  # type: ignore[import-not-found,no-redef]
    from fabric_formats import parse_nccl_conf  # type: ignore[import-not-found,no-redef]
    from fabric_host import (  # type: ignore[import-not-found,no-redef]
        cc_knob_paths,
        netdev_split,
        port_of,
        tos_knob_paths,
    )
    from fabric_host import path as host_path  # type: ignore[no-redef]
    from fabric_qos_backend import (  # type: ignore[import-not-found,no-redef]
        QosError,
        diff_state,
        parse,
        read_argvs,
        write_argvs,
    )

STATE_DIR = "/var/lib/fabtune/revert"
LOG_FILE = "/var/log/fabtune-revert.log"
SCRIPT = "/usr/local/sbin/fabtune-revert"
LIB_DIR = "/usr/local/lib/fabtune"
NCCL_CONF = "/etc/nccl.conf"
RDMA_CM_CONF = "/etc/fabtune/rdma_cm.conf"
PERSISTED = "/etc/fabtune/persisted.json"
BOOT_LOG = "/var/log/fabtune-boot.log"
OPENSM_CONF = "/etc/opensm/opensm.conf"
OPENSM_SERVICE = "opensm"
KEPT_FILES = (NCCL_CONF, RDMA_CM_CONF, OPENSM_CONF, PERSISTED)
RUN_ID_RE = re.compile(r"^[A-Za-z0-9_.-]+$")
MIN_DEADLINE_S = 10
PRERUN_KEPT = 10
SYSFS_KNOBS = ("mtu", "ecn", "cnp_dscp", "cnp_prio", "roce_tos", "roce_mode")
RDMA_CM = "/sys/kernel/config/rdma_cm/"
TOOL_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
COMMAND_TIMEOUT_S = 60

# Evaluated at import time on the host's Python (3.8 and later): typing's generics, not list[...].
Run = Callable[[Sequence[str]], str]
"""``run(argv) -> stdout``, raising ApplyError when the command fails."""
Which = Callable[[str], object]
"""``which(name)``: whether (where) a command is installed."""
Log = Callable[[str], None]
Changes = Dict[str, Tuple[Optional[str], str]]
"""``{path: (before, after)}`` of sysfs/configfs writes (``plan``)."""
Lines = List[str]


class ApplyError(Exception):
    """A command or a write that did not do what the apply needs."""


# --- sysfs / configfs (fabric_sysfs) -----------------------------------------------------------

def nic_knobs(root: str, interface: str, nic: Mapping[str, Any]) -> tuple[dict[str, str], str | None]:
    """``(knobs, problem)``: the ``{path: value}`` a desired NIC entry asks for on ``interface``."""
    knobs: dict[str, str] = {}
    if nic.get("mtu") is not None:
        knobs[f"/sys/class/net/{interface}/mtu"] = str(nic["mtu"])
    knobs.update(cc_knob_paths(interface, nic))
    if nic.get("roce_tos") is not None or nic.get("roce_mode") is not None:
        where = port_of(root, interface)
        if where is None:
            return knobs, f"{interface} has no RDMA port: cannot set roce_tos/roce_mode"
        knobs.update(tos_knob_paths(where[0], where[1], nic))
    return knobs, None


def read_value(path: str) -> str | None:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return None


def write_value(path: str, value: str) -> None:
    Path(path).write_text(value + "\n")


def cm_group(path: str) -> str | None:
    """The rdma_cm configfs group directory a path needs (``.../rdma_cm/mlx5_0``), or None."""
    if not path.startswith(RDMA_CM):
        return None
    dev = path[len(RDMA_CM):].split("/", 1)[0]
    return RDMA_CM + dev


def plan(knobs: Mapping[str, object], reader: Callable[[str], str | None] | None = None,
         root: str = "/") -> tuple[dict[str, str | None], Changes]:
    """``(before, changes)``: current values and the ``{path: (before, after)}`` that differ."""
    reader = reader or read_value
    before: dict[str, str | None] = {}
    changes: Changes = {}
    for name in sorted(knobs):
        want = str(knobs[name]).strip()
        have = reader(host_path(root, name))
        before[name] = have
        if have != want:
            changes[name] = (have, want)
    return before, changes


def write_changes(changes: Changes, writer: Callable[[str, str], None] | None = None,
                  reader: Callable[[str], str | None] | None = None, root: str = "/") -> None:
    """Write ``plan``'s changes (creating rdma_cm configfs groups) and read them back.

    Raises:
        ApplyError: a write failed or the kernel did not take a value.
    """
    writer, reader = writer or write_value, reader or read_value
    for name, (_old, new) in sorted(changes.items()):
        group = cm_group(name)
        try:
            if group and not Path(host_path(root, group)).is_dir():
                Path(host_path(root, group)).mkdir()
            writer(host_path(root, name), new)
        except OSError as exc:
            raise ApplyError(f"cannot write {new!r} to {name}: {exc}") from exc
    wrong = {p: reader(host_path(root, p)) for p in changes}
    wrong = {p: v for p, v in wrong.items() if v != changes[p][1]}
    if wrong:
        raise ApplyError(f"the kernel did not take the values: {wrong}")


# --- QoS (fabric_qos) --------------------------------------------------------------------------

def pick_backend(which: Which) -> str | None:
    """``mlnx_qos`` when installed, else ``dcb``, else None (``which(name)`` finds a command)."""
    for name in ("mlnx_qos", "dcb"):
        if which(name):
            return name
    return None


def qos_apply(backend: str, interface: str, desired: Mapping[str, Any], run: Run,
              check_mode: bool = False) -> tuple[dict[str, Any], dict[str, tuple[Any, Any]], list[list[str]]]:
    """Read the port's QoS state, write what differs; ``(before, changes, commands)``.

    ``run(argv)`` runs a command and returns its stdout (raising on failure).
    """
    before = parse(backend, [run(argv) for argv in read_argvs(backend, interface)])
    changes = diff_state(before, desired)
    commands = write_argvs(backend, interface, changes, dict(before, **desired))
    if changes and not check_mode:
        for argv in commands:
            run(argv)
    return before, changes, commands


# --- /etc/nccl.conf (nccl_env) -----------------------------------------------------------------

def render_nccl_conf(nccl: Mapping[str, object], header: str = "#\n# Ansible managed\n#") -> str:
    """The nccl_env role's file: the header, then sorted ``KEY=value`` lines."""
    return header.rstrip("\n") + "\n" + "".join(f"{k}={nccl[k]}\n" for k in sorted(nccl))


def write_file(name: str, content: str | None, mode: int = 0o644) -> None:
    """Replace a file atomically (``content`` None removes it)."""
    if content is None:
        with contextlib.suppress(OSError):
            Path(name).unlink()
        return
    parent = Path(name).parent
    if not parent.is_dir():
        parent.mkdir(0o755, parents=True)
    tmp = f"{name}.fabtune-{os.getpid()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        os.write(fd, content.encode("utf-8"))
    finally:
        os.close(fd)
    Path(tmp).chmod(mode)
    Path(tmp).rename(name)  # atomic: readers see the old file or the new one


def bad_path(path: str) -> str | None:
    """Why ``path`` is refused as a file a module writes, or None: absolute and normalised only."""
    if not Path(path).is_absolute() or os.path.normpath(path) != path:
        return f"must be an absolute, normalised path, not {path!r}"
    return None


def read_file(name: str) -> str | None:
    try:
        return Path(name).read_text()
    except OSError:
        return None


# --- a whole snapshot --------------------------------------------------------------------------

class CommandRunner:
    """``run(argv) -> stdout`` over subprocess, raising ApplyError on a non-zero exit or past ``timeout_s``;
    ``run.which(name)`` finds a command on the same search path."""

    def __init__(self, extra_path: str = TOOL_PATH, timeout_s: int = COMMAND_TIMEOUT_S) -> None:
        self.search = os.pathsep.join(filter(None, [os.environ.get("PATH"), extra_path]))
        self.timeout_s = timeout_s

    def which(self, name: str) -> str | None:
        return shutil.which(name, path=self.search)

    def __call__(self, argv: Sequence[str]) -> str:
        exe = self.which(argv[0])
        if exe is None:
            raise ApplyError(f"{argv[0]}: command not found")
        try:
            proc = subprocess.run([exe, *argv[1:]], capture_output=True, text=True, check=False,
                                  timeout=self.timeout_s)
        except subprocess.TimeoutExpired as exc:
            raise ApplyError(f"{' '.join(argv)} did not finish within {self.timeout_s:d} s") from exc
        if proc.returncode != 0:
            output = (proc.stdout + proc.stderr).strip()[-500:]
            raise ApplyError(f"{' '.join(argv)} failed (rc {proc.returncode:d}): {output}")
        return proc.stdout


def command_runner(extra_path: str = TOOL_PATH, timeout_s: int = COMMAND_TIMEOUT_S) -> CommandRunner:
    """A :class:`CommandRunner` (``run(argv) -> stdout`` with ``run.which``)."""
    return CommandRunner(extra_path, timeout_s)


def apply_snapshot(snapshot: object, run: Run, which: Which, *, root: str = "/",
                   files: Mapping[str, str | None] | None = None,
                   log: Log | None = None) -> tuple[Lines, Lines]:
    """Apply a snapshot (a ``fabric_desired`` tree, couplings not enforced) to this host.

    Same order as the apply playbook: per RoCE port QoS and MTU (roce_qos), ECN/CNP (roce_cc),
    rdma_cm ToS/mode (roce_tos); then ``/etc/nccl.conf`` (nccl_env). ``files`` are the managed
    files' bytes when the revert was armed (``{path: text or None}``): ``/etc/nccl.conf`` is put back
    byte for byte when its settings are the snapshot's (else rendered from the snapshot), the
    rdma_cm boot configuration as it was, and on a subnet manager host (a snapshot with ``sm``)
    ``opensm.conf`` as it was, opensm restarted when systemd runs the host.

    Returns:
        ``(changes, problems)``: one line per change made, one per thing that could not be done
        (an invalid snapshot changes nothing).
    """
    log = log or (lambda text: None)
    files = files or {}
    roce, other = netdev_split(root)
    problems, normal = validate(snapshot, roce, other, enforce_couplings=False)
    if problems:
        return [], [f"invalid snapshot: {p}" for p in problems]
    changes: Lines = []
    failed: Lines = []
    backend = pick_backend(which)
    for netdev in sorted(normal.get("nics", {})):
        nic = normal["nics"][netdev]
        qos_changes, qos_failed = _apply_qos(netdev, nic, backend, run, log)
        sysfs_changes, sysfs_failed = _apply_sysfs(root, netdev, nic)
        changes += qos_changes + sysfs_changes
        failed += qos_failed + sysfs_failed
    if "nccl" in normal:
        _restore_nccl(normal["nccl"], files, root, changes, failed)
    if RDMA_CM_CONF in files:
        _restore_file(RDMA_CM_CONF, files[RDMA_CM_CONF], root, changes, failed)
    if PERSISTED in files:  # what the host re-applies at boot goes back with the knobs
        _restore_file(PERSISTED, files[PERSISTED], root, changes, failed)
    if normal.get("sm") and OPENSM_CONF in files:
        _restore_sm(files[OPENSM_CONF], run, root, changes, failed)
    return changes, failed


def _apply_qos(netdev: str, nic: Mapping[str, Any], backend: str | None, run: Run,
               log: Log) -> tuple[Lines, Lines]:
    """The QoS knobs of one port: ``(changes, problems)``; an unreadable QoS state fails this port only."""
    qos = {k: nic[k] for k in QOS_KNOBS if k in nic}
    if not qos:
        return [], []
    changes: Lines = []
    try:
        if backend is None:
            raise ApplyError(f"neither mlnx_qos nor dcb is installed: cannot set the QoS of {netdev}")
        _before, diff, commands = qos_apply(backend, netdev, qos, run)
        for key, (old, new) in sorted(diff.items()):
            changes.append(f"{netdev}.{key}: {old} -> {new}")
        for argv in commands:
            log("ran: {}".format(" ".join(argv)))
    except (ApplyError, QosError, ValueError) as exc:
        return changes, [f"{netdev} qos: {exc}"]
    return changes, []


def _apply_sysfs(root: str, netdev: str, nic: Mapping[str, Any]) -> tuple[Lines, Lines]:
    """The sysfs/configfs knobs of one port (MTU, ECN/CNP, rdma_cm ToS/mode): ``(changes, problems)``."""
    sysfs = {k: nic[k] for k in SYSFS_KNOBS if k in nic}
    knobs, problem = nic_knobs(root, netdev, sysfs)
    failed = [problem] if problem else []
    _before, diff = plan(knobs, root=root)
    try:
        write_changes(diff, root=root)
    except ApplyError as exc:
        return [], [*failed, f"{netdev} sysfs: {exc}"]
    return [f"{name}: {old} -> {new}" for name, (old, new) in sorted(diff.items())], failed


def _restore_sm(content: str | None, run: Run, root: str, changes: Lines, failed: Lines) -> None:
    """Put the subnet manager's configuration back as it was; restart opensm under systemd.

    Like the ``ib_sm`` role's handlers: where systemd does not run the host, nothing restarts
    opensm behind the service manager's back.
    """
    before = len(changes)
    _restore_file(OPENSM_CONF, content, root, changes, failed)
    if len(changes) == before or not Path(host_path(root, "/run/systemd/system")).is_dir():
        return
    try:
        run(["systemctl", "restart", OPENSM_SERVICE])
        changes.append(f"{OPENSM_SERVICE}: restarted")
    except ApplyError as exc:
        failed.append(f"{OPENSM_SERVICE}: {exc}")


def _restore_nccl(nccl: Mapping[str, object] | None, files: Mapping[str, str | None], root: str,
                  changes: Lines, failed: Lines) -> None:
    saved = files.get(NCCL_CONF)
    content: str | None
    if nccl is None:
        content = None
    elif isinstance(saved, str) and validate({"nccl": parse_nccl_conf(saved)},
                                             enforce_couplings=False)[1].get("nccl") == nccl:
        content = saved
    else:
        content = render_nccl_conf(nccl)
    _restore_file(NCCL_CONF, content, root, changes, failed)


def _restore_file(name: str, content: str | None, root: str, changes: Lines, failed: Lines) -> None:
    where = host_path(root, name)
    if read_file(where) == content:
        return
    try:
        write_file(where, content)
        changes.append("{}: {}".format(name, "removed" if content is None else "restored"))
    except OSError as exc:
        failed.append(f"{name}: {exc}")


# --- the revert record and its timer -----------------------------------------------------------

def unit_name(run_id: str) -> str:
    """The transient unit name (``.timer`` and ``.service``) of a run's revert."""
    return f"fabtune-revert-{run_id}"


def arm_argv(systemd_run: str, run_id: str, deadline_s: float, script: str = SCRIPT) -> list[str]:
    return [systemd_run, f"--unit={unit_name(run_id)}", f"--on-active={int(deadline_s):d}s",
            "--timer-property=AccuracySec=1s", script, run_id]


def record_path(state_dir: str, run_id: str, kind: str = "armed") -> str:
    suffix = {"armed": ".json", "reverted": ".reverted.json", "failed": ".revert-failed.json",
              "prerun": ".prerun.json"}[kind]
    return os.path.join(state_dir, run_id + suffix)  # noqa: PTH118 (a str path, as the callers keep it)


@contextlib.contextmanager
def locked(state_dir: str) -> Iterator[None]:
    """The revert lock (arm, confirm and revert of every run take it)."""
    if not Path(state_dir).is_dir():
        Path(state_dir).mkdir(0o700, parents=True)
    fd = os.open(Path(state_dir) / ".lock", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def write_record(state_dir: str, run_id: str, record: Mapping[str, Any]) -> None:
    """Write ``STATE_DIR/<run_id>.json`` (0600, atomically)."""
    if not Path(state_dir).is_dir():
        Path(state_dir).mkdir(0o700, parents=True)
    write_file(record_path(state_dir, run_id), json.dumps(record, indent=1, sort_keys=True) + "\n", 0o600)


def keep_prerun(state_dir: str, run_id: str, record: Mapping[str, Any], kept: int = PRERUN_KEPT) -> bool:
    """Write ``<run_id>.prerun.json`` from the run's first armed record (never replaced); keep the last runs.

    Returns whether it was written (False: the run already has its pre-run record).
    """
    path = record_path(state_dir, run_id, "prerun")
    if Path(path).exists():
        return False
    write_file(path, json.dumps(dict(record, prerun=True), indent=1, sort_keys=True) + "\n", 0o600)
    records = [entry for entry in Path(state_dir).iterdir() if entry.name.endswith(".prerun.json")]
    for old in sorted(records, key=lambda entry: entry.stat().st_mtime)[:-kept]:
        old.unlink()
    return True


def kept_files(root: str = "/", names: Sequence[str] = KEPT_FILES) -> dict[str, str | None]:
    """``{path: text or None}``: the managed files as they are now (for a byte-exact revert)."""
    return {name: read_file(host_path(root, name)) for name in names}


def revert(run_id: str, *, state_dir: str = STATE_DIR, root: str = "/", run: Run | None = None,
           which: Which | None = None, log: Log | None = None,
           why: str = "deadline passed without confirmation") -> int:
    """Apply ``<run_id>.json``'s snapshot and mark it done; the exit status of fabtune-revert."""
    log = log or (lambda text: None)
    run = run or command_runner()
    which = which or getattr(run, "which", None) or shutil.which
    with locked(state_dir):
        armed = record_path(state_dir, run_id)
        text = read_file(armed)
        if text is None:
            log(f"run {run_id}: nothing armed (confirmed, or already reverted): nothing to do")
            return 0
        try:
            record = json.loads(text)
        except ValueError as exc:
            log(f"run {run_id}: unreadable record {armed}: {exc}")
            Path(armed).rename(record_path(state_dir, run_id, "failed"))
            return 1
        log(f"run {run_id}: {why}: reverting to the snapshot")
        changes, failed = apply_snapshot(record.get("snapshot") or {}, run, which, root=root,
                                         files=record.get("files") or {}, log=log)
        for line in changes:
            log(f"run {run_id}: reverted {line}")
        for line in failed:
            log(f"run {run_id}: FAILED {line}")
        record.update(reverted_at=time.time(), reverted_why=why, changes=changes, problems=failed)
        write_file(armed, json.dumps(record, indent=1, sort_keys=True) + "\n", 0o600)
        kind = "failed" if failed else "reverted"
        Path(armed).rename(record_path(state_dir, run_id, kind))
        outcome = "revert incomplete" if failed else "reverted"
        log(f"run {run_id}: {outcome} ({len(changes)} changes, {len(failed)} problems)")
        return 1 if failed else 0


def file_logger(name: str = LOG_FILE, tag: str = "fabtune-revert") -> Log:
    def log(text: str) -> None:
        line = f"{time.strftime('%Y-%m-%dT%H:%M:%S%z')} {tag}[{os.getpid()}]: {text}\n"
        try:
            with Path(name).open("a") as handle:
                handle.write(line)
        except OSError:
            sys.stderr.write(line)
    return log


# --- moving an armed run's deadline (fabric_revert state=extended; fabtune-revert --extend) ------

Exec = Callable[[Sequence[str]], Tuple[int, str, str]]
"""``execute(argv) -> (rc, stdout, stderr)``: the module's ``run_command``, or :func:`exec_argv`."""
EXTEND_FLAG = "--extend"
EXIT_REVERTED = 3  # fabtune-revert --extend: the host already reverted the run


class RevertError(Exception):
    """An extension (or a confirmation) that cannot be done; ``reverted``: the host already reverted
    the run (the change is gone, and the controller must know)."""

    def __init__(self, msg: str, reverted: bool = False) -> None:
        super().__init__(msg)
        self.reverted = reverted


def done_kinds(state_dir: str, run_id: str) -> list[str]:
    """The kinds of done record the host has for the run (``reverted``, ``failed``)."""
    return [k for k in ("reverted", "failed") if Path(record_path(state_dir, run_id, k)).exists()]


def reverted_when(path: str) -> str:
    """When and why the done record ``path`` says its run was reverted (the path if it cannot say)."""
    try:
        with Path(path).open() as handle:
            record = json.load(handle)
        stamp, why = record.get("reverted_at"), record.get("reverted_why")
        when = f"at {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(stamp))}" if stamp else path
        return f"{when}: {why}" if why else when
    except (OSError, ValueError):
        return path


def check_not_reverted(state_dir: str, run_id: str) -> None:
    """Raise RevertError(reverted=True) when the host already reverted the run (record renamed)."""
    kinds = done_kinds(state_dir, run_id)
    if kinds and not Path(record_path(state_dir, run_id)).exists():
        done = record_path(state_dir, run_id, kinds[0])
        raise RevertError(f"run {run_id} was already reverted on this host ({reverted_when(done)}): "
                          "the change is gone", reverted=True)


ARMED_RUN_OPTION = "armed_run"  # the modules' option naming the run an apply armed (apply.yml's)


@contextlib.contextmanager
def while_armed(run_id: str | None, state_dir: str | None = None) -> Iterator[None]:
    """Make a change of an armed apply only while this host holds ``run_id`` armed.

    The change is made under the revert's lock: a revert whose deadline passes meanwhile waits for
    it, then puts the snapshot back over it. Before, the armed record must be there: where the revert
    already fired (an apply that outlasted its deadline), nothing more is changed, so the host stays
    at its snapshot instead of holding the rest of the move with no revert left to undo it. An empty
    ``run_id`` (an apply that armed nothing) is not guarded. ``state_dir``: default STATE_DIR.

    Raises:
        RevertError: the run is not armed on this host (``reverted``: its revert already fired).
    """
    if not run_id:
        yield
        return
    if not RUN_ID_RE.match(run_id):
        raise RevertError(f"{ARMED_RUN_OPTION}: {run_id!r} is not a run id (letters, digits, '_', '.', '-')")
    state_dir = state_dir or STATE_DIR
    with locked(state_dir):
        if not Path(record_path(state_dir, run_id)).exists():
            check_not_reverted(state_dir, run_id)
            raise RevertError(f"run {run_id} is not armed on this host: nothing is changed without its "
                              "revert")
        yield


def stop_timer(execute: Exec, systemctl: str, run_id: str) -> None:
    """Stop the run's revert timer; not loaded (rc 5) is fine."""
    timer = unit_name(run_id) + ".timer"
    rc, out, err = execute([systemctl, "stop", timer])
    if rc not in (0, 5):
        raise RevertError(f"systemctl stop {timer} failed (rc {rc:d}): {(out + err).strip()}")
    execute([systemctl, "reset-failed", unit_name(run_id) + ".service", timer])


def extend_armed(run_id: str, deadline_s: int, *, state_dir: str, execute: Exec, systemctl: str,
                 systemd_run: str, script: str = SCRIPT) -> dict[str, Any]:
    """Move the revert deadline of the armed run ``run_id`` to ``deadline_s`` from now (the saved
    snapshot is kept); ``{"armed", "deadline", "commands"}``.

    Raises:
        RevertError: the host already reverted the run (``reverted``), the run is not armed here,
            or systemd refused the timer.
    """
    with locked(state_dir):
        check_not_reverted(state_dir, run_id)
        try:
            record = json.loads(Path(record_path(state_dir, run_id)).read_text())
        except (OSError, ValueError) as exc:
            raise RevertError(f"run {run_id} is not armed on this host ({exc})") from exc
        argv = arm_argv(systemd_run, run_id, deadline_s, record.get("script") or script)
        stop_timer(execute, systemctl, run_id)
        now = time.time()
        record.update(deadline=now + deadline_s, deadline_s=deadline_s, extended_at=now)
        write_record(state_dir, run_id, record)
        rc, out, err = execute(argv)
        if rc != 0:
            raise RevertError(f"cannot re-arm the revert timer (rc {rc:d}): {(out + err).strip()}")
    return {"armed": True, "deadline": record["deadline"], "commands": [argv]}


CONFIRM_FLAG = "--confirm"


def confirm_armed(run_id: str, *, state_dir: str, execute: Exec, systemctl: str) -> dict[str, Any]:
    """Keep the run ``run_id`` on this host: stop its revert timer and remove the saved snapshot
    (the pre-run record stays); ``{"changed"}``: whether anything was armed. Idempotent.

    Raises:
        RevertError: the host already reverted the run (``reverted``), or systemd refused the stop.
    """
    with locked(state_dir):
        saved = Path(record_path(state_dir, run_id)).exists()
        rc, out, _err = execute([systemctl, "is-active", unit_name(run_id) + ".timer"])
        active = rc == 0 and out.strip() in ("active", "activating")
        if not saved:
            check_not_reverted(state_dir, run_id)
        if saved or active:
            stop_timer(execute, systemctl, run_id)
            if saved:
                Path(record_path(state_dir, run_id)).unlink()
    return {"changed": saved or active}


def exec_argv(timeout_s: int = COMMAND_TIMEOUT_S) -> Exec:
    """An :data:`Exec` over subprocess, each command held to ``timeout_s`` (rc 124 past it)."""
    def execute(argv: Sequence[str]) -> tuple[int, str, str]:
        try:
            proc = subprocess.run(list(argv), capture_output=True, text=True, check=False, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return 124, "", f"{argv[0]} did not finish within {timeout_s:d} s"
        except OSError as exc:
            return 127, "", str(exc)
        return proc.returncode, proc.stdout, proc.stderr
    return execute


def extend_main(argv: Sequence[str], state_dir: str = STATE_DIR, log: Log | None = None) -> int:
    """``fabtune-revert --extend RUN_ID DEADLINE_S``: the module's extension, for a direct SSH call.

    Prints one JSON object (``run_id``, ``armed``, ``deadline``, ``reverted``, ``msg`` on failure);
    exits 0 when extended, EXIT_REVERTED when the host already reverted the run, 1 on another failure.
    """
    log = log or (lambda text: None)
    if (len(argv) != 2 or not RUN_ID_RE.match(argv[0]) or not argv[1].isdigit()
            or int(argv[1]) < MIN_DEADLINE_S):
        sys.stderr.write(f"usage: fabtune-revert {EXTEND_FLAG} RUN_ID DEADLINE_S   "
                         f"(DEADLINE_S: whole seconds, at least {MIN_DEADLINE_S:d})\n")
        return 2
    run_id, deadline_s = argv[0], int(argv[1])
    runner = command_runner()
    tools = [runner.which("systemctl"), runner.which("systemd-run")]
    result: dict[str, Any] = {"run_id": run_id, "armed": False, "deadline": None, "reverted": False}
    try:
        if tools[0] is None or tools[1] is None:
            raise RevertError("systemctl or systemd-run not found: cannot re-arm a revert timer")
        result.update(extend_armed(run_id, deadline_s, state_dir=state_dir, execute=exec_argv(),
                                   systemctl=tools[0], systemd_run=tools[1]))
    except RevertError as exc:
        result.update(reverted=exc.reverted, msg=str(exc))
        log(f"run {run_id}: extend failed: {exc}")
        sys.stdout.write(json.dumps(result, sort_keys=True) + "\n")
        return EXIT_REVERTED if exc.reverted else 1
    log(f"run {run_id}: deadline extended to {deadline_s:d} s from now")
    sys.stdout.write(json.dumps(result, sort_keys=True) + "\n")
    return 0


def confirm_main(argv: Sequence[str], state_dir: str = STATE_DIR, log: Log | None = None) -> int:
    """``fabtune-revert --confirm RUN_ID``: the module's confirmation, for a direct SSH call.

    Prints one JSON object (``run_id``, ``changed``, ``reverted``, ``msg`` on failure); exits 0 when
    the run is kept (or was already), EXIT_REVERTED when the host already reverted it, 1 on another
    failure.
    """
    log = log or (lambda text: None)
    if len(argv) != 1 or not RUN_ID_RE.match(argv[0]):
        sys.stderr.write(f"usage: fabtune-revert {CONFIRM_FLAG} RUN_ID   (RUN_ID: letters, digits, _ . -)\n")
        return 2
    run_id = argv[0]
    systemctl = command_runner().which("systemctl")
    result: dict[str, Any] = {"run_id": run_id, "changed": False, "reverted": False}
    try:
        if systemctl is None:
            raise RevertError("systemctl not found: cannot stop a revert timer")
        result.update(confirm_armed(run_id, state_dir=state_dir, execute=exec_argv(), systemctl=systemctl))
    except RevertError as exc:
        result.update(reverted=exc.reverted, msg=str(exc))
        log(f"run {run_id}: confirm failed: {exc}")
        sys.stdout.write(json.dumps(result, sort_keys=True) + "\n")
        return EXIT_REVERTED if exc.reverted else 1
    if result["changed"]:
        log(f"run {run_id}: confirmed (revert cancelled)")
    sys.stdout.write(json.dumps(result, sort_keys=True) + "\n")
    return 0


def revert_main(argv: Sequence[str], state_dir: str = STATE_DIR, log_file: str = LOG_FILE,
                root: str = "/") -> int:
    """``fabtune-revert RUN_ID``: the command the revert timer runs; ``fabtune-revert --extend RUN_ID
    DEADLINE_S``: move the run's deadline (:func:`extend_main`); ``fabtune-revert --confirm RUN_ID``:
    keep the run (:func:`confirm_main`)."""
    log = file_logger(log_file)
    if argv[:1] == [EXTEND_FLAG]:
        return extend_main(argv[1:], state_dir, log)
    if argv[:1] == [CONFIRM_FLAG]:
        return confirm_main(argv[1:], state_dir, log)
    if len(argv) != 1 or not RUN_ID_RE.match(argv[0]):
        sys.stderr.write("usage: fabtune-revert RUN_ID   (RUN_ID: letters, digits, _ . -)\n")
        return 2
    try:
        return revert(argv[0], state_dir=state_dir, root=root, log=log)
    except Exception as exc:  # the log must say why, whatever happened
        log(f"run {argv[0]}: revert crashed: {exc!r}")
        return 1


# --- settings that survive a reboot (fabric_persist records, fabtune-boot re-applies) ----------
#
# The NIC knobs live in the kernel and the NIC (DCB netlink, sysfs, configfs): a reboot or a driver
# reload puts them back at their defaults. Each role that sets them records what it set in
# PERSISTED (module fabric_persist): ``{"nics": {netdev: {knob: value}}}``, the knobs merged over
# what earlier applies recorded (a knob a profile leaves out keeps its last value, as on the host).
# /etc/nccl.conf, rdma_cm.conf and opensm.conf are files already: they need no re-apply.
#
# PERSISTED is one of KEPT_FILES: arming a revert saves its bytes, and the revert (by its timer,
# or by fabtune-boot after a reboot) puts them back. So an unconfirmed move never outlives its
# revert, in the live state or in what the next boot re-applies. ``fabtune-boot`` (unit
# fabtune-boot.service) first reverts every run still armed whose timer is gone (a reboot ends
# transient timers), then applies PERSISTED with ``apply_snapshot``: the code of every revert.

def _merge_knob(key: str, old: object, new: object) -> object:
    """A knob's persisted value after ``new`` is applied: a map (dscp2prio, ecn) is merged per key
    (the keys a desired state leaves out are not managed), any other value is replaced."""
    if key in ("dscp2prio", "ecn") and isinstance(old, dict) and isinstance(new, dict):
        merged = dict(old)
        merged.update(new)
        return merged
    return new


def canonical_nics(nics: Mapping[str, Any] | None) -> dict[str, Any]:
    """``nics`` as JSON sees it (string map keys, sorted lists kept as given), empty entries dropped."""
    text = json.dumps(nics or {}, sort_keys=True)
    return {dev: knobs for dev, knobs in json.loads(text).items() if knobs}


def merge_persisted(persisted: Mapping[str, Any] | None, nics: Mapping[str, Any] | None) -> dict[str, Any]:
    """The persisted ``{netdev: {knob: value}}`` with the knobs of ``nics`` applied over it.

    A port whose trust is not ``dscp`` keeps no DSCP map: it would not apply, and a desired state
    holding one is refused (a rollback to a ``pcp`` snapshot must not leave an unappliable file).
    """
    out = canonical_nics(persisted)
    for dev, knobs in sorted(canonical_nics(nics).items()):
        entry = dict(out.get(dev, {}))
        for key, value in sorted(knobs.items()):
            entry[key] = _merge_knob(key, entry.get(key), value)
        if entry.get("trust") != "dscp":  # the map applies only under DSCP trust (fabric_facts omits it)
            entry.pop("dscp2prio", None)
        out[dev] = entry
    return out


def persisted_text(nics: Mapping[str, Any] | None) -> str:
    """The PERSISTED file's text for ``nics`` (canonical: the same state gives the same bytes)."""
    return json.dumps({"nics": canonical_nics(nics)}, indent=1, sort_keys=True) + "\n"


def read_persisted(root: str = "/", name: str = PERSISTED) -> tuple[dict[str, Any], str | None]:
    """``(nics, problem)``: the persisted NIC knobs (``{}`` when the file does not exist)."""
    text = read_file(host_path(root, name))
    if text is None:
        return {}, None
    try:
        doc = json.loads(text)
    except ValueError as exc:
        return {}, f"{name} is not JSON: {exc}"
    if not isinstance(doc, dict) or not isinstance(doc.get("nics", {}), dict):
        return {}, f"{name} must hold {{\"nics\": {{netdev: {{knob: value}}}}}}"
    return canonical_nics(doc.get("nics")), None


DONE_SUFFIXES = (".reverted.json", ".revert-failed.json", ".prerun.json")


def armed_runs(state_dir: str) -> list[tuple[float, str]]:
    """``[(armed_at, run_id)]`` of the runs with a revert armed (``<run_id>.json``), newest first."""
    if not Path(state_dir).is_dir():
        return []
    out: list[tuple[float, str]] = []
    for entry in Path(state_dir).iterdir():
        name = entry.name
        if not name.endswith(".json") or name.endswith(DONE_SUFFIXES):
            continue
        run_id = name[:-len(".json")]
        if not RUN_ID_RE.match(run_id):
            continue
        try:
            with entry.open() as handle:
                armed_at = float(json.load(handle).get("armed_at") or 0)
        except (OSError, ValueError, TypeError, AttributeError):
            armed_at = 0.0
        out.append((armed_at, run_id))
    return sorted(out, reverse=True)


def timer_loaded(run: Run, run_id: str) -> bool:
    """Whether the revert timer of ``run_id`` is loaded (``systemctl is-active`` says so)."""
    try:
        run(["systemctl", "is-active", "--quiet", unit_name(run_id) + ".timer"])
    except ApplyError:
        return False
    return True


def stranded_runs(state_dir: str, run: Run) -> list[str]:
    """The armed runs whose revert timer is gone (newest first): after a reboot, every armed run.

    Taken under the revert lock: arming writes the record and starts the timer under it, so a
    record seen here either has its timer or lost it. No revert directory: nothing was ever armed.
    """
    if not Path(state_dir).is_dir():
        return []
    with locked(state_dir):
        return [run_id for _at, run_id in armed_runs(state_dir) if not timer_loaded(run, run_id)]


def present_nics(nics: Mapping[str, Any], root: str = "/") -> tuple[dict[str, Any], Lines]:
    """``(nics of this host's RoCE ports, problems)``: entries of ports the host no longer has are left
    out."""
    roce, _other = netdev_split(root)
    kept = {dev: knobs for dev, knobs in nics.items() if dev in roce}
    gone = [f"{dev}: no such RoCE port on this host (its persisted settings are skipped)"
            for dev in sorted(nics) if dev not in roce]
    return kept, gone


def boot(state_dir: str = STATE_DIR, root: str = "/", run: Run | None = None, which: Which | None = None,
         log: Log | None = None) -> int:
    """What ``fabtune-boot`` does at boot; its exit status (1 when anything could not be done).

    1. Revert every run still armed whose timer is gone, newest first (so the oldest snapshot,
       the state before every unconfirmed move, is what stays): an unconfirmed move never survives
       a reboot, and each revert also puts PERSISTED back as it was when that run was armed.
    2. Apply PERSISTED (the NIC knobs the roles recorded) with ``apply_snapshot``.
    """
    log = log or (lambda text: None)
    run = run or command_runner()
    which = which or getattr(run, "which", None) or shutil.which
    status = 0
    for run_id in stranded_runs(state_dir, run):
        status |= revert(run_id, state_dir=state_dir, root=root, run=run, which=which, log=log,
                         why="armed but never confirmed, and its timer is gone (the host rebooted)")
    nics, problem = read_persisted(root)
    if problem:
        log(f"FAILED {problem}")
        return 1
    if not nics:
        log(f"nothing persisted in {PERSISTED}: nothing to apply")
        return status
    nics, gone = present_nics(nics, root)
    changes, failed = apply_snapshot({"nics": nics}, run, which, root=root, log=log)
    for line in changes:
        log(f"applied {line}")
    for line in gone + failed:
        log(f"FAILED {line}")
    log(f"persisted settings applied ({len(changes)} changes, {len(gone) + len(failed)} problems)")
    return 1 if (failed or gone or status) else 0


def boot_main(argv: Sequence[str], state_dir: str = STATE_DIR, log_file: str = BOOT_LOG,
              root: str = "/") -> int:
    """``fabtune-boot``: the command of fabtune-boot.service."""
    log = file_logger(log_file, "fabtune-boot")
    if argv:
        sys.stderr.write("usage: fabtune-boot   (no arguments)\n")
        return 2
    try:
        return boot(state_dir=state_dir, root=root, log=log)
    except Exception as exc:  # the log must say why, whatever happened
        log(f"boot apply crashed: {exc!r}")
        return 1
