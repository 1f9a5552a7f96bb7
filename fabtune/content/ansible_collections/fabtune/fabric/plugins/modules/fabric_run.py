#!/usr/bin/python
# Copyright: fabtune contributors
# Apache License 2.0 (see LICENSE in this collection or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: fabric_run
short_description: Run several commands at once on a host, each to its end or its deadline
description:
  - Starts every command of O(commands) at the same moment (argv lists, no shell), waits for all of
    them and returns each one's exit status and output.
  - A command still running at O(deadline_s) gets SIGTERM, and SIGKILL 10 s later; it is reported
    with C(timed_out=true).
  - "For benchmark clients that must start together (perftest pairs of one round): one module call
    instead of one async job per command, and no polling."
  - "O(start): servers left running in the background once each listens on its port (ss for TCP,
    iproute2's C(rdma resource show cm_id) for rdma_cm); the call returns them as RV(started).
    A later call's O(collect) waits for them to end (O(collect_s)), stops what is left and returns
    what each did. One call instead of an async job per server, its polling and a wait task."
  - "O(first): commands run before anything else of the call, all at once (a round's clients), so
    that the same call can then wait for the host's servers (O(collect)) and read the counters after
    them (O(commands))."
  - "Order within one call: O(first), then O(collect), then O(commands), then O(start) (run the
    clients, wait for the servers they talk to, read counters after the servers ended; read counters
    before the servers start)."
  - Runs nothing in check mode (like M(ansible.builtin.command)).
version_added: "1.0.0"
options:
  first:
    description:
      - "Commands run first, before O(collect), each C({id, argv}) as in O(commands): all started
        together, each under O(first_prefix), each waited for until O(first_deadline_s) (then
        SIGTERM, and SIGKILL 10 s later), and reported in RV(first_runs)."
      - "For a round's clients and servers on one host in one call: the clients run to their end,
        then O(collect) waits for the servers (started by an earlier call) and O(commands) reads the
        counters after both."
    type: list
    elements: dict
    default: []
  first_prefix:
    description: Put before every O(first) argv (e.g. C([timeout, --kill-after=10s, 60s])).
    type: list
    elements: str
    default: []
  first_deadline_s:
    description: Seconds the O(first) commands may run, all at once from their start.
    type: int
    default: 60
  first_at:
    description:
      - "When to start the O(first) commands: seconds since the epoch on this host's clock. The
        controller gives every host of a round the same instant, so clients dispatched to their
        hosts one after another still start together (a C(-D 2) perftest client started a second
        after the others overlaps them for half its run). A host that gets the call after the
        instant starts at once and says how late in RV(first_late_s)."
      - "Never waits more than O(first_wait_max_s): a host whose clock runs behind the
        controller's starts that much later, never hangs."
    type: float
  first_wait_max_s:
    description: The longest wait for O(first_at), in seconds.
    type: int
    default: 10
  commands:
    description: The commands, each C({id, argv}); C(argv) is a list whose first item is the program.
    type: list
    elements: dict
    default: []
  argvs:
    description:
      - Commands given as plain argv lists, instead of O(commands); each one's id is its position
        (C("0"), C("1"), ...).
    type: list
    elements: list
  start:
    description:
      - "Commands to leave running, each C({id, argv, port, rdma_cm}): started in the background
        (their own session, output to a private directory), then waited for until each listens on
        C(port): a TCP socket in C(ss -Hltn), or with C(rdma_cm=true) a LISTEN cm_id in
        C(rdma -j resource show cm_id). One that exits or does not listen within O(listen_s) fails
        the call, and everything it started is stopped."
    type: list
    elements: dict
    default: []
  start_prefix:
    description: Put before every O(start) argv (e.g. C([timeout, --kill-after=10s, 60s])).
    type: list
    elements: str
    default: []
  listen_s:
    description: Seconds each O(start) command has to listen.
    type: int
    default: 30
  collect:
    description: "RV(started) of an earlier call on this host: each is waited for up to O(collect_s)
      seconds, then those still running stopped together (SIGTERM to each session, SIGKILL 10 s later),
      and reported in RV(collected)."
    type: list
    elements: dict
    default: []
  collect_s:
    description: Seconds to wait for the O(collect) commands to end by themselves.
    type: int
    default: 10
  sequential:
    description:
      - Run O(commands) one after another, each with its own O(deadline_s), instead of all at once
        (benchmark launches of one batch, which must not overlap; one module call instead of one
        per launch).
    type: bool
    default: false
  argv_prefix:
    description: Put before every command's argv (e.g. C([timeout, --kill-after=10s, 60s])).
    type: list
    elements: str
    default: []
  deadline_s:
    description: Seconds each of O(commands) may run (all at once from the start, or each from its
      own start with O(sequential)).
    type: int
    default: 60
  mpirun_ssh_reuse:
    description:
      - "Open MPI launches of this call (O(commands) whose program is C(mpirun)) share their SSH
        connections to the other hosts: the first launch connects, the later ones start their
        daemons over its connections (OpenSSH's ControlMaster), instead of each launch connecting
        to every host again."
      - "Each launch gets C(--mca plm_rsh_args): the site's own value, read with C(ompi_info), then
        C(-o ControlMaster=auto -o ControlPersist=60s -o ControlPath=DIR/%C), DIR a directory
        private to this call (mode 0700) on this host only. OpenSSH takes the first value of an
        option, so the site's own connection options win. Each launch also gets
        C(--mca plm_rsh_no_tree_spawn 1): mpirun starts every daemon itself, as it does anyway up
        to the default routed radix (64 hosts), so no daemon on another host runs ssh with a DIR
        that is not there. Ask for this only for launches of a few dozen hosts."
      - "When the call ends the masters are told to exit and DIR is removed; a master whose exit
        could not be sent ends by itself 60 s after its last launch."
      - "Left as given, and said in RV(ssh_reuse): fewer than two launches; C(ompi_info) missing or
        naming no C(plm_rsh_args) (Open MPI 5 launches through PRRTE); a launcher that is not ssh
        (C(plm_rsh_agent), C(plm_rsh_force_rsh), Grid Engine's qrsh); a launch that sets
        C(plm_rsh_args) itself; a socket path OpenSSH cannot take."
    type: bool
    default: false
  mpirun_rsh_site:
    description:
      - "The launch host's C(plm_rsh_*) values as an earlier call with O(mpirun_ssh_reuse) read
        them (RV(ssh_reuse.site)): given, this call takes them instead of running C(ompi_info)
        again (a site's Open MPI settings do not change between the batches of one run)."
    type: dict
attributes:
  check_mode:
    support: none
  diff_mode:
    support: none
author:
  - fabtune contributors
"""

EXAMPLES = r"""
- name: Read counters before and start the round's ib_write_bw servers on this host
  fabtune.fabric.fabric_run:
    commands: [{id: "ethtool eth2", argv: [ethtool, -S, eth2]}]
    start:
      - id: "h02->h01/mlx5_0:18515"
        argv: [ib_write_bw, -d, mlx5_0, -p, "18515", -R]
        port: 18515
        rdma_cm: true
    start_prefix: [timeout, --kill-after=10s, 60s]
  register: servers

- name: Stop them and read counters after
  fabtune.fabric.fabric_run:
    collect: "{{ servers.started }}"
    commands: [{id: "ethtool eth2", argv: [ethtool, -S, eth2]}]

- name: Run this host's clients, then wait for its servers (up to 75 s), then read counters after
  fabtune.fabric.fabric_run:
    first:
      - {id: "h01->h03/mlx5_0:18516", argv: [ib_write_bw, -d, mlx5_0, -p, "18516", -R, 10.0.0.3]}
    first_prefix: [timeout, --kill-after=10s, 60s]
    first_deadline_s: 75
    collect: "{{ servers.started }}"
    collect_s: 75
    commands: [{id: "ethtool eth2", argv: [ethtool, -S, eth2]}]

- name: Run two nccl-tests launches in turn, each killed at 900 s (ids "0" and "1")
  fabtune.fabric.fabric_run:
    argvs:
      - [mpirun, -np, "2", all_reduce_perf, -b, 8G, -e, 8G]
      - [mpirun, -np, "2", alltoall_perf, -b, 8G, -e, 8G]
    sequential: true
    argv_prefix: [timeout, --kill-after=10s, 900s]
    deadline_s: 915

- name: Run the round's ib_write_bw clients on this host
  fabtune.fabric.fabric_run:
    commands:
      - {id: "h02->h01/mlx5_0:18515", argv: [ib_write_bw, -d, mlx5_0, -p, "18515", 10.0.0.1]}
      - {id: "h02->h01/mlx5_1:18516", argv: [ib_write_bw, -d, mlx5_1, -p, "18516", 10.0.1.1]}
    deadline_s: 60
"""

RETURN = r"""
first_runs:
  description: One entry per O(first) command, in the order given, like RV(runs).
  returned: always
  type: list
  elements: dict
  sample: [{"id": "h01->h03/mlx5_0:18516", "rc": 0, "stdout": "...", "stderr": "", "timed_out": false}]
first_late_s:
  description: Seconds after O(first_at) that the O(first) commands started (0.0 on time, or without it).
  returned: always
  type: float
first_wait_s:
  description:
    - "Seconds this host waited for O(first_at) before the O(first) commands started (0.0 when it
      was late, or without it): how much of the controller's lead the call did not need."
  returned: always
  type: float
  sample: 0.0
runs:
  description: One entry per command, in the order given.
  returned: always
  type: list
  elements: dict
  sample: [{"id": "h02->h01/mlx5_0:18515", "rc": 0, "stdout": "...", "stderr": "", "timed_out": false}]
started:
  description: One entry per O(start) command, listening; give them to a later call's O(collect).
  returned: always
  type: list
  elements: dict
  sample: [{"id": "h02->h01/mlx5_0:18515", "pid": 4242, "dir": "/tmp/fabtune-run-k2j4", "since": "1234"}]
collected:
  description: One entry per O(collect) command, like RV(runs).
  returned: always
  type: list
  elements: dict
ssh_reuse:
  description:
    - "With O(mpirun_ssh_reuse), whether the launches shared their SSH connections, or why not;
      where they did, C(site): the C(plm_rsh_*) values they were built on (read with C(ompi_info),
      or O(mpirun_rsh_site) as given), for a later call's O(mpirun_rsh_site)."
  returned: always
  type: dict
  sample: {"used": true, "why": "2 launches share their ssh connections",
           "site": {"plm_rsh_agent": "ssh : rsh", "plm_rsh_args": ""}}
"""

import contextlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import IO, Any, Iterator, Mapping, Sequence, Tuple

from ansible.module_utils.basic import AnsibleModule

KILL_AFTER_S = 10

# A started command: (command, process or None, stdout file, stderr file, why it did not start or None).
Started = Tuple[Mapping[str, Any], "subprocess.Popen[bytes] | None", IO[bytes], IO[bytes], "str | None"]


def _start(argv: Sequence[object], out: IO[bytes], err: IO[bytes]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [str(a) for a in argv], stdin=subprocess.DEVNULL, stdout=out, stderr=err, start_new_session=True
    )


def _signal(proc: subprocess.Popen[bytes], sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, sig)  # the command's own session: whatever it started goes too


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL after KILL_AFTER_S: the command missed its deadline."""
    _signal(proc, signal.SIGTERM)
    try:
        proc.wait(timeout=KILL_AFTER_S)
    except subprocess.TimeoutExpired:
        _signal(proc, signal.SIGKILL)
        proc.wait()


def _read(handle: IO[bytes]) -> str:
    handle.seek(0)
    return handle.read().decode("utf-8", errors="replace")


def _start_all(commands: Sequence[Mapping[str, Any]], files: Sequence[tuple[IO[bytes], IO[bytes]]],
               prefix: Sequence[str]) -> list[Started]:
    """Start every command, its stdout and stderr into its ``files``."""
    started: list[Started] = []
    for command, (out, err) in zip(commands, files):
        try:
            proc = _start(list(prefix) + list(command["argv"]), out, err)
        except OSError as exc:
            started.append((command, None, out, err, str(exc)))
            continue
        started.append((command, proc, out, err, None))
    return started


def run_all(commands: Sequence[Mapping[str, Any]], deadline_s: float,
            prefix: Sequence[str] = ()) -> list[dict[str, Any]]:
    """Start every command, wait for each until the shared deadline, return what each did."""
    with contextlib.ExitStack() as stack:
        files = [
            (stack.enter_context(tempfile.TemporaryFile()), stack.enter_context(tempfile.TemporaryFile()))
            for _command in commands
        ]
        started = _start_all(commands, files, prefix)
        end = time.monotonic() + deadline_s
        runs = []
        for command, proc, out, err, problem in started:
            timed_out = False
            if proc is not None:
                try:
                    proc.wait(timeout=max(0.0, end - time.monotonic()))
                except subprocess.TimeoutExpired:
                    timed_out = True
                    _stop(proc)
            stderr = problem if problem is not None else _read(err)
            runs.append({
                "id": command["id"],
                "rc": proc.returncode if proc is not None else 127,
                "stdout": _read(out),
                "stderr": stderr,
                "timed_out": timed_out,
            })
        return runs


# Background commands (O(start)/O(collect)). Each is started by a monitor process in its own session
# that holds no descriptor of the module's (so the SSH channel closes when the module returns), waits
# for the command and writes its exit status to RC_FILE; its output goes to OUT_FILE and ERR_FILE in
# a private directory named DIR_PREFIX..., removed when the command is collected.
DIR_PREFIX = "fabtune-run-"
OUT_FILE, ERR_FILE, RC_FILE = "stdout", "stderr", "rc"
POLL_S = 0.1
MAX_OUTPUT = 65536  # bytes of a background command's stdout and stderr returned (its end)


def _since(pid: int) -> str:
    """The process's start time (clock ticks since boot, /proc/PID/stat field 22): with the pid, who it is."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    return stat.rsplit(")", 1)[-1].split()[19]


def _monitor(argv: Sequence[str], workdir: Path, report: int) -> None:
    """In the monitor (a grandchild in its own session): start the command, report its pid, wait, write rc."""
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.closerange(3, report)
    os.closerange(report + 1, 65536)
    with (workdir / OUT_FILE).open("wb") as out, (workdir / ERR_FILE).open("wb") as err:
        try:
            proc = subprocess.Popen(list(argv), stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                    start_new_session=True)
        except OSError as exc:
            os.write(report, f"error {exc}".encode())
            return
        os.write(report, f"{proc.pid} {_since(proc.pid)}".encode())
        os.close(report)
        rc = proc.wait()
    (workdir / (RC_FILE + ".new")).write_text(str(rc))
    (workdir / (RC_FILE + ".new")).replace(workdir / RC_FILE)


def _spawn(argv: Sequence[str], workdir: Path) -> tuple[int, str]:
    """Start ``argv`` under a detached monitor; its pid and start time.

    Raises:
        OSError: the command could not be started (its reason).
    """
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover (runs in the forked processes)
        code = 0
        try:
            os.close(read_end)
            os.setsid()
            if os.fork() == 0:
                _monitor(argv, workdir, write_end)
        except BaseException:  # nothing may escape a forked child
            code = 1
        finally:
            os._exit(code)
    os.close(write_end)
    os.waitpid(child, 0)
    with os.fdopen(read_end, "rb") as reader:
        said = reader.read().decode(errors="replace").split(" ", 1)
    if said[0] == "error" or not said[0].isdigit():
        raise OSError(said[1] if len(said) > 1 else "the command did not start")
    return int(said[0]), said[1] if len(said) > 1 else ""


LISTEN_CHECKS = {  # how a server's listening shows: TCP in ss, rdma_cm (-R) in iproute2's rdma
    False: ["ss", "-Hltn"],
    True: ["rdma", "-j", "resource", "show", "cm_id"],
}


def _listening(entries: Sequence[Mapping[str, Any]]) -> set[int]:
    """The indexes of ``entries`` that listen on their ports: one ss and/or one rdma call for all.

    Raises:
        OSError: a check's program cannot run (its name in the message).
    """
    found: set[int] = set()
    for rdma_cm, argv in LISTEN_CHECKS.items():
        mine = [i for i, e in enumerate(entries) if bool(e.get("rdma_cm")) is rdma_cm]
        if not mine:
            continue
        try:
            done = subprocess.run(argv, capture_output=True, timeout=10, check=False)
        except subprocess.TimeoutExpired:
            continue  # not known to listen yet: looked at again
        if done.returncode != 0:
            continue
        text = done.stdout.decode(errors="replace")
        check = listening_cm_id if rdma_cm else listening_tcp
        found.update(i for i in mine if check(text, int(entries[i]["port"])))
    return found


def listening_tcp(text: str, port: int) -> bool:
    """Whether ``ss -Hltn`` lists a listening socket on ``port`` (its fourth column, ``ADDR:PORT``)."""
    for line in text.splitlines():
        fields = line.split()
        if len(fields) >= 4 and fields[3].rpartition(":")[2] == str(port):
            return True
    return False


def listening_cm_id(text: str, port: int) -> bool:
    """Whether ``rdma -j resource show cm_id`` lists a LISTEN cm_id on ``port`` (src-addr ``ADDR:PORT``)."""
    try:
        rows = json.loads(text)
    except ValueError:
        return False
    return any(
        isinstance(row, dict) and row.get("state") == "LISTEN"
        and str(row.get("src-addr", "")).rpartition(":")[2] == str(port)
        for row in (rows if isinstance(rows, list) else [])
    )


def _ended(workdir: Path) -> int | None:
    try:
        return int((workdir / RC_FILE).read_text())
    except (OSError, ValueError):
        return None


def _tail(path: Path) -> str:
    try:
        with path.open("rb") as handle:
            handle.seek(0, os.SEEK_END)
            handle.seek(max(0, handle.tell() - MAX_OUTPUT))
            return handle.read().decode("utf-8", errors="replace")
    except OSError:
        return ""


def _alive(entry: Mapping[str, Any]) -> bool:
    """Whether the started command still runs (its pid, with the start time it had then)."""
    return _since(int(entry["pid"])) == str(entry.get("since", ""))


def _stop_together(entries: Sequence[Mapping[str, Any]]) -> list[int | None]:
    """SIGTERM to every command's session at once, SIGKILL KILL_AFTER_S later to those of the ones
    still running; each one's exit status once known (None: never known). A command already gone is
    not signalled (its pid may be another process's now): its status has a second to be written.
    However many are left, the stop takes at most twice KILL_AFTER_S, not that per command."""
    codes: list[int | None] = [None] * len(entries)
    gone: set[int] = set()
    for sig in (signal.SIGTERM, signal.SIGKILL):
        deadlines: dict[int, float] = {}
        for index, entry in enumerate(entries):
            if codes[index] is not None or index in gone:
                continue
            if not _alive(entry):
                gone.add(index)
                deadlines[index] = time.monotonic() + 1.0  # reaped, its status about to be written
                continue
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(int(entry["pid"]), sig)
            deadlines[index] = time.monotonic() + KILL_AFTER_S
        while deadlines:
            for index in list(deadlines):
                codes[index] = _ended(Path(str(entries[index]["dir"])))
                if codes[index] is not None or time.monotonic() >= deadlines[index]:
                    del deadlines[index]
            if deadlines:
                time.sleep(POLL_S)
    return codes


def _wait_ended(workdir: Path, seconds: float) -> int | None:
    end = time.monotonic() + seconds
    while True:
        rc = _ended(workdir)
        if rc is not None or time.monotonic() >= end:
            return rc
        time.sleep(POLL_S)


def collect_all(entries: Sequence[Mapping[str, Any]], wait_s: float) -> list[dict[str, Any]]:
    """Wait for the started commands to end (``wait_s`` in all), stop every one still running at
    once (``_stop_together``), report and clean up."""
    end = time.monotonic() + wait_s
    ended = [_wait_ended(Path(str(entry["dir"])), max(0.0, end - time.monotonic())) for entry in entries]
    late = [index for index, rc in enumerate(ended) if rc is None]
    stopped = dict(zip(late, _stop_together([entries[index] for index in late])))
    found = []
    for index, entry in enumerate(entries):
        workdir = Path(str(entry["dir"]))
        rc = stopped[index] if index in stopped else ended[index]
        found.append({"id": entry["id"], "rc": -9 if rc is None else rc, "stdout": _tail(workdir / OUT_FILE),
                      "stderr": _tail(workdir / ERR_FILE), "timed_out": index in stopped})
        shutil.rmtree(workdir, ignore_errors=True)
    return found


def _start_one(entry: Mapping[str, Any], prefix: Sequence[str]) -> dict[str, Any]:
    workdir = Path(tempfile.mkdtemp(prefix=DIR_PREFIX))
    try:
        pid, since = _spawn([str(a) for a in list(prefix) + list(entry["argv"])], workdir)
    except OSError:
        shutil.rmtree(workdir, ignore_errors=True)
        raise
    return {"id": entry["id"], "pid": pid, "dir": str(workdir), "since": since}


def _wait_listening(waiting: list[tuple[Mapping[str, Any], dict[str, Any]]], listen_s: float) -> str | None:
    """Wait until every started entry listens; why not (one exited first, or ``listen_s`` passed)."""
    end = time.monotonic() + listen_s
    while waiting:
        try:
            listening = _listening([entry for entry, _done in waiting])
        except OSError as exc:
            return f"start: cannot tell whether the servers listen: {exc}"
        waiting = [pair for i, pair in enumerate(waiting) if i not in listening]
        for entry, done in waiting:
            if _ended(Path(done["dir"])) is not None:
                return f"start: {entry['id']} exited before it listened on port {entry['port']}"
        if waiting and time.monotonic() >= end:
            late = waiting[0][0]
            return f"start: {late['id']} did not listen on port {late['port']} within {listen_s} s"
        if waiting:
            time.sleep(POLL_S)
    return None


def start_all(entries: Sequence[Mapping[str, Any]], prefix: Sequence[str],
              listen_s: float) -> tuple[list[dict[str, Any]], str | None]:
    """Start every entry, then wait until each listens; on a failure, stop them all and say why."""
    started: list[dict[str, Any]] = []
    problem = None
    for entry in entries:
        try:
            started.append(_start_one(entry, prefix))
        except OSError as exc:
            problem = f"start: {entry['id']}: {exc}"
            break
    if problem is None:
        problem = _wait_listening(list(zip(entries, started)), listen_s)
    if problem is None:
        return started, None
    said = collect_all(started, 0)
    why = "; ".join(f"{r['id']}: rc {r['rc']}: {r['stderr'].strip()[-300:]}"
                    for r in said if r["stderr"].strip())
    return [], problem + (f" ({why})" if why else "")


def _valid_list(module: AnsibleModule, name: str, entries: Sequence[Mapping[str, Any]]) -> None:
    for index, command in enumerate(entries):
        argv: Any = command.get("argv")
        if "id" not in command or not isinstance(argv, list) or not argv:
            module.fail_json(msg=f"{name}[{index}]: needs an id and a non-empty argv list, got {command!r}")
        if os.sep in str(argv[0]) and not Path(str(argv[0])).is_absolute():
            module.fail_json(
                msg=f"{name}[{index}].argv[0]: {argv[0]!r} must be a program name or an absolute path")


def _valid_start(module: AnsibleModule, entries: Sequence[Mapping[str, Any]]) -> None:
    _valid_list(module, "start", entries)
    for index, entry in enumerate(entries):
        if not str(entry.get("port", "")).isdigit() or not 0 < int(entry["port"]) < 65536:
            module.fail_json(msg=f"start[{index}].port: {entry.get('port')!r} must be a port (1-65535)")


def _valid_collect(module: AnsibleModule, entries: Sequence[Mapping[str, Any]]) -> None:
    """Only directories this module made (a temp dir named DIR_PREFIX...) and real pids."""
    tmp = Path(tempfile.gettempdir()).resolve()
    for index, entry in enumerate(entries):
        workdir = Path(str(entry.get("dir", "")))
        if (not workdir.is_absolute() or workdir.resolve().parent != tmp
                or not workdir.name.startswith(DIR_PREFIX) or workdir.is_symlink()):
            module.fail_json(msg=f"collect[{index}].dir: {entry.get('dir')!r}: not one fabric_run made")
        if "id" not in entry or not str(entry.get("pid", "")).isdigit() or int(entry["pid"]) <= 1:
            module.fail_json(msg=f"collect[{index}]: needs the id and pid of a started command: {entry!r}")


# mpirun launches sharing their SSH connections (O(mpirun_ssh_reuse)).
OMPI_INFO = ["ompi_info", "--parsable", "--param", "plm", "rsh", "--level", "9"]
OMPI_INFO_S = 20
SSH_DIR_PREFIX = "fabtune-ssh-"
SSH_PERSIST = "60s"
SSH_EXIT_S = 10
# A master binds DIR/%C plus a random suffix (".XXXXXXXXXXXXXXXX") before renaming it to DIR/%C;
# OpenSSH refuses a path that does not fit a Unix socket address (sun_path, 108 bytes on Linux,
# the terminating NUL included).
SUN_PATH_LEN = 108
CONTROL_HASH_LEN = 40  # %C: a SHA-1 of the connection's names, in hex
CONTROL_SUFFIX_LEN = 17


def _is_mpirun(argv: Sequence[object]) -> bool:
    return bool(argv) and Path(str(argv[0])).name == "mpirun"


def site_rsh(text: str) -> dict[str, str] | None:
    """The plm rsh values (``plm_rsh_agent``, ``plm_rsh_args``, ``plm_rsh_force_rsh``,
    ``plm_rsh_disable_qrsh``) in ``ompi_info --parsable`` output, each line
    ``mca:plm:rsh:param:NAME:value:VALUE``; None where plm_rsh_args is not listed."""
    values: dict[str, str] = {}
    for line in text.splitlines():
        head, sep, value = line.partition(":value:")
        name = head.rpartition(":")[2]
        if sep and head.startswith("mca:plm:rsh:param:") and name.startswith("plm_rsh_"):
            values[name] = value.strip().strip('"')
    return values if "plm_rsh_args" in values else None


def why_not_ssh(values: Mapping[str, str], env: Mapping[str, str]) -> str | None:
    """Why Open MPI would not launch with OpenSSH (None: it would): rsh forced, Grid Engine's qrsh
    (its environment, qrsh not disabled), or an agent whose first alternative on PATH (``A : B``, in
    that order, as Open MPI picks) is not ssh."""
    if values.get("plm_rsh_force_rsh", "false") == "true":
        return "plm_rsh_force_rsh is set: the launcher is rsh"
    if env.get("SGE_ROOT") and env.get("JOB_ID") and values.get("plm_rsh_disable_qrsh", "false") != "true":
        return "a Grid Engine job: the launcher is qrsh"
    agent = values.get("plm_rsh_agent") or "ssh : rsh"
    for choice in agent.split(":"):
        words = choice.split()
        if words and shutil.which(words[0]):
            return None if Path(words[0]).name == "ssh" else f"plm_rsh_agent {agent!r} is not ssh"
    return f"plm_rsh_agent {agent!r}: none of it on PATH"


def shared_args(site_args: str, socket_dir: str) -> str:
    """``plm_rsh_args`` for launches that share connections: the site's, then the sharing options."""
    sharing = f"-o ControlMaster=auto -o ControlPersist={SSH_PERSIST} -o ControlPath={socket_dir}/%C"
    return f"{site_args} {sharing}".strip()


def _site_rsh_read() -> tuple[dict[str, str] | None, str]:
    """ompi_info's plm_rsh values, or None and why not."""
    try:
        done = subprocess.run(OMPI_INFO, capture_output=True, timeout=OMPI_INFO_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"ompi_info could not tell the launcher's ssh arguments: {exc}"
    found = site_rsh(done.stdout.decode(errors="replace")) if done.returncode == 0 else None
    if found is None:
        return None, f"ompi_info names no plm_rsh_args (rc {done.returncode}): launches left as given"
    return found, ""


def _why_not_shared(commands: Sequence[Mapping[str, Any]]) -> str | None:
    launches = [c for c in commands if _is_mpirun(c["argv"])]
    if len(launches) < 2:
        return f"{len(launches)} mpirun launch(es): nothing to share"
    if any("plm_rsh_args" in [str(a) for a in c["argv"]] for c in launches):
        return "a launch sets plm_rsh_args itself: launches left as given"
    return None


def _with_args(command: Mapping[str, Any], rsh_args: str) -> dict[str, Any]:
    argv = list(command["argv"])
    if not _is_mpirun(argv):
        return dict(command)
    return {**command, "argv": [argv[0], "--mca", "plm_rsh_args", rsh_args,
                                "--mca", "plm_rsh_no_tree_spawn", "1", *argv[1:]]}


def _stop_masters(socket_dir: Path) -> None:
    """Tell each connection master in ``socket_dir`` to exit, then remove the directory."""
    for sock in sorted(socket_dir.iterdir()):
        with contextlib.suppress(OSError, subprocess.TimeoutExpired):
            subprocess.run(["ssh", "-o", f"ControlPath={sock}", "-O", "exit", "fabtune-launch-master"],
                           stdin=subprocess.DEVNULL, capture_output=True, timeout=SSH_EXIT_S, check=False)
    shutil.rmtree(socket_dir, ignore_errors=True)


def _site_given(given: Mapping[str, Any] | None) -> tuple[dict[str, str] | None, str]:
    """The site's plm_rsh values as a caller gave them (``mpirun_rsh_site``), else read again."""
    if given and "plm_rsh_args" in given:
        return {str(k): str(v) for k, v in given.items()}, ""
    return _site_rsh_read()


@contextlib.contextmanager
def ssh_shared(
    commands: Sequence[Mapping[str, Any]], wanted: bool, site: Mapping[str, Any] | None = None
) -> Iterator[tuple[list[dict[str, Any]], dict[str, Any]]]:
    """``commands`` with their mpirun launches sharing SSH connections where they can, and what was
    done; ``site``: the plm_rsh values an earlier call read (None: ``ompi_info`` reads them)."""
    why = _why_not_shared(commands) if wanted else "not asked"
    found = None
    if why is None:
        found, why = _site_given(site)
        not_ssh = why_not_ssh(found, os.environ) if found is not None else None
        if not_ssh is not None:
            found, why = None, f"{not_ssh}: launches left as given"
    if found is None:
        yield [dict(c) for c in commands], {"used": False, "why": why}
        return
    socket_dir = Path(tempfile.mkdtemp(prefix=SSH_DIR_PREFIX))
    try:
        if len(str(socket_dir)) + 1 + CONTROL_HASH_LEN + CONTROL_SUFFIX_LEN >= SUN_PATH_LEN or any(
                c.isspace() for c in str(socket_dir)):
            yield [dict(c) for c in commands], {
                "used": False, "why": f"{socket_dir}: not a path OpenSSH takes for a control socket"}
            return
        rsh_args = shared_args(found["plm_rsh_args"], str(socket_dir))
        launches = sum(1 for c in commands if _is_mpirun(c["argv"]))
        yield [_with_args(c, rsh_args) for c in commands], {
            "used": True, "why": f"{launches} launches share their ssh connections", "site": found}
    finally:
        _stop_masters(socket_dir)


def wait_until(at: float | None, wait_max_s: float) -> tuple[float, float]:
    """Sleep until epoch second ``at`` on this host's clock (at most ``wait_max_s``); how late it
    was, and how long it waited."""
    if at is None:
        return 0.0, 0.0
    left = at - time.time()
    if left > 0:
        waited = min(left, wait_max_s)
        time.sleep(waited)
        return 0.0, waited
    return -left, 0.0


def _checked(module: AnsibleModule) -> dict[str, Any]:
    """The module's parameters, every hand check passed (``argvs`` turned into ``commands``)."""
    params: dict[str, Any] = module.params
    for name in ("deadline_s", "listen_s", "first_deadline_s"):
        if params[name] <= 0:
            module.fail_json(msg=f"{name}: {params[name]} must be a positive number of seconds")
    if params["first_wait_max_s"] < 0:
        module.fail_json(msg=f"first_wait_max_s: {params['first_wait_max_s']} must be 0 or more seconds")
    if params["collect_s"] < 0:
        module.fail_json(msg=f"collect_s: {params['collect_s']} must be 0 or more seconds")
    if params["argvs"] is not None:
        if params["commands"]:
            module.fail_json(msg="parameters are mutually exclusive: commands|argvs")
        params["commands"] = [{"id": str(i), "argv": argv} for i, argv in enumerate(params["argvs"])]
    _valid_list(module, "first", params["first"])
    _valid_list(module, "commands" if params["argvs"] is None else "argvs", params["commands"])
    _valid_start(module, params["start"])
    _valid_collect(module, params["collect"])
    return params


def get_argument_spec() -> dict[str, Any]:
    """The module's options (DOCUMENTATION describes each)."""
    return {
        "first": {"type": "list", "elements": "dict", "default": []},
        "first_prefix": {"type": "list", "elements": "str", "default": []},
        "first_deadline_s": {"type": "int", "default": 60},
        "first_at": {"type": "float"},
        "first_wait_max_s": {"type": "int", "default": 10},
        "commands": {"type": "list", "elements": "dict", "default": []},
        "argvs": {"type": "list", "elements": "list"},
        "argv_prefix": {"type": "list", "elements": "str", "default": []},
        "deadline_s": {"type": "int", "default": 60},
        "sequential": {"type": "bool", "default": False},
        "start": {"type": "list", "elements": "dict", "default": []},
        "start_prefix": {"type": "list", "elements": "str", "default": []},
        "listen_s": {"type": "int", "default": 30},
        "collect": {"type": "list", "elements": "dict", "default": []},
        "collect_s": {"type": "int", "default": 10},
        "mpirun_ssh_reuse": {"type": "bool", "default": False},
        "mpirun_rsh_site": {"type": "dict"},
    }


def main() -> None:
    module = AnsibleModule(argument_spec=get_argument_spec(), supports_check_mode=False)
    params = _checked(module)
    late_s, waited_s = (wait_until(params["first_at"], params["first_wait_max_s"]) if params["first"]
                        else (0.0, 0.0))
    first = run_all(params["first"], params["first_deadline_s"], params["first_prefix"])
    collected = collect_all(params["collect"], params["collect_s"])
    with ssh_shared(params["commands"], params["mpirun_ssh_reuse"], params["mpirun_rsh_site"]) as (
            commands, reuse):
        if params["sequential"]:
            runs = [run for command in commands
                    for run in run_all([command], params["deadline_s"], params["argv_prefix"])]
        else:
            runs = run_all(commands, params["deadline_s"], params["argv_prefix"])
    started, problem = start_all(params["start"], params["start_prefix"], params["listen_s"])
    done = {"first_runs": first, "first_late_s": round(late_s, 3), "first_wait_s": round(waited_s, 3),
            "runs": runs, "collected": collected, "ssh_reuse": reuse}
    if problem is not None:
        module.fail_json(msg=problem, started=[], **done)
    module.exit_json(changed=False, started=started, **done)


if __name__ == "__main__":
    main()
