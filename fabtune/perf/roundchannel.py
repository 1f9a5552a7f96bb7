"""One round of perftest pairs over the direct SSH channel: bench_ib_write_bw.yml's steps and deadlines.

The playbook makes three ``fabtune.fabric.fabric_run`` calls per host; this makes the same steps over
one connection per host (``fabtune.sshdirect.Session``) and records each host's step as the result of
the playbook's task (``fabric_run``'s ``runs``, ``started``, ``collected``), so the round's results
are read the same way whichever way it ran:

1. every host at once: its counter reads, then its servers started (each on its own channel, under
   coreutils ``timeout`` at the round's deadline), then waited for until each listens on its port
   (``fabric_listen``: ``ss`` for TCP, iproute2's ``rdma`` for rdma_cm), ``LISTEN_S`` at most;
2. every client host at once: its clients together, each under ``timeout``, given up 15 s after the
   deadline;
3. every host at once: its servers waited for ``COLLECT_S``, those left stopped (SIGTERM, SIGKILL
   ``KILL_AFTER_S`` later), then its counter reads again.

A server that exits or does not listen in time fails the round, as the playbook's task does. Whatever
happens, no server started is left running when the round returns. Each command runs with the
playbook's PATH (the inventory's ``fabtune_tool_path``, else ``sshdirect.TOOL_PATH``), as the login
user. A server is started as ``sh -c 'echo "$$"; exec "$@"' fabtune-server ARGV...``: the shell
prints its pid and becomes the server's ``timeout``, which is how a server left behind is stopped;
the argv reaches the server as positional parameters, never as shell text.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

import paramiko

from fabtune import ansible, sshdirect
from fabtune.collection import module_util

# bench_ib_write_bw.yml's tasks: the counters read before (with the servers started), the
# ib_write_bw clients per host, the counters read after (with the servers stopped)
BEFORE_TASK = "Read counters before and start the servers"
CLIENTS_TASK = "Run clients"
AFTER_TASK = "Stop the servers and read counters after"
# bench_ib_write_bw.yml's settings: reads' deadline, the servers' listen and collect waits, the
# coreutils timeout's kill delay, the module's stop after a client's deadline
READ_DEADLINE_S = 60
LISTEN_S = 30
COLLECT_S = 10
KILL_AFTER = "--kill-after=10s"
KILL_AFTER_S = 10
CLIENT_GRACE_S = 15
SERVER_WRAPPER = ("sh", "-c", 'echo "$$"; exec "$@"', "fabtune-server")
PID_WAIT_S = 10.0  # for the shell's first line (its pid)
POLL_S = 0.1

T = TypeVar("T")


@dataclass
class Server:
    """A server started over a session: its ``server_command`` (``id``, ``argv``, ``port``,
    ``rdma_cm``), its channel, its pid on the host, and its output so far."""

    command: Mapping[str, Any]
    chan: paramiko.Channel
    pid: int | None = None
    out: bytearray = field(default_factory=bytearray)
    err: bytearray = field(default_factory=bytearray)

    def drain(self) -> None:
        while self.chan.recv_ready():
            self.out += self.chan.recv(65536)[: max(0, sshdirect.MAX_OUTPUT - len(self.out))]
        while self.chan.recv_stderr_ready():
            self.err += self.chan.recv_stderr(65536)[: max(0, sshdirect.MAX_OUTPUT - len(self.err))]

    @property
    def ended(self) -> bool:
        self.drain()
        return self.chan.exit_status_ready() and not self.chan.recv_ready()

    def wait(self, until: float) -> bool:
        """Whether the server ended by ``until`` (monotonic seconds)."""
        while not self.ended:
            left = until - time.monotonic()
            if left <= 0:
                return False
            self.chan.status_event.wait(min(left, POLL_S))
        return True


def _parallel(hosts: Sequence[str], forks: int, work: Callable[[str], T]) -> list[T]:
    if not hosts:
        return []
    with ThreadPoolExecutor(max_workers=max(1, min(forks, len(hosts))), thread_name_prefix="round") as pool:
        return list(pool.map(work, hosts))


def _task(host: str, task: str, result: dict[str, Any], failed: str | None = None,
          unreachable: bool = False) -> ansible.TaskResult:
    body = {"changed": False, "runs": [], "started": [], "collected": [], **result}
    if failed is not None:
        body.update(msg=failed, failed=True)
    event = "runner_on_unreachable" if unreachable else "runner_on_failed" if failed else "runner_on_ok"
    if unreachable:
        body["unreachable"] = True
    return ansible.TaskResult(host=host, task=task, action="fabtune.fabric.fabric_run", event=event,
                              changed=False, result=body)


def _start(session: sshdirect.Session, command: Mapping[str, Any], env: Sequence[str],
           timeout: Sequence[str]) -> Server:
    """Start one server (``env``, the wrapper, ``timeout``, its argv); read the pid its shell prints.

    Raises:
        OSError: it did not start (no pid line in time).
    """
    server = Server(command, session.open([*env, *SERVER_WRAPPER, *timeout, *map(str, command["argv"])]))
    end = time.monotonic() + PID_WAIT_S
    while b"\n" not in server.out and not server.chan.exit_status_ready() and time.monotonic() < end:
        server.chan.status_event.wait(POLL_S)
        server.drain()
    server.drain()
    first, newline, rest = bytes(server.out).partition(b"\n")
    if not newline or not first.strip().isdigit():
        server.chan.close()
        said = bytes(server.err).decode(errors="replace").strip()[-300:]
        raise OSError(f"the command did not start: {said}")
    server.pid, server.out = int(first), bytearray(rest)
    return server


def _listening(session: sshdirect.Session, waiting: Sequence[Server], env: Sequence[str]) -> set[int]:
    """The indexes of ``waiting`` whose servers listen on their ports (one check per kind)."""
    listen = module_util("fabric_listen")
    found: set[int] = set()
    for rdma_cm, argv in listen.LISTEN_CHECKS.items():
        mine = [i for i, s in enumerate(waiting) if bool(s.command.get("rdma_cm")) is rdma_cm]
        if not mine:
            continue
        done = session.run([{"id": "listen", "argv": argv}], deadline_s=10, prefix=env)[0]
        if done["rc"] != 0:
            continue  # not known to listen yet: looked at again
        check = listen.listening_cm_id if rdma_cm else listen.listening_tcp
        found.update(i for i in mine if check(done["stdout"], int(waiting[i].command["port"])))
    return found


def _wait_listening(session: sshdirect.Session, servers: Sequence[Server], env: Sequence[str]) -> str | None:
    """Wait until every server listens; why not (one exited first, or LISTEN_S passed)."""
    end = time.monotonic() + LISTEN_S
    waiting = list(servers)
    while waiting:
        listening = _listening(session, waiting, env)
        waiting = [s for i, s in enumerate(waiting) if i not in listening]
        for server in waiting:
            if server.ended:
                command = server.command
                return f"start: {command['id']} exited before it listened on port {command['port']}"
        if waiting and time.monotonic() >= end:
            late = waiting[0].command
            return f"start: {late['id']} did not listen on port {late['port']} within {LISTEN_S} s"
        if waiting:
            time.sleep(POLL_S)
    return None


def _stop(session: sshdirect.Session, server: Server) -> None:
    """SIGTERM to the server's ``timeout`` (which passes it on), SIGKILL KILL_AFTER_S later."""
    for signal in ("-TERM", "-KILL"):
        if server.ended or server.pid is None:
            return
        session.run([{"id": "stop", "argv": ["kill", signal, str(server.pid)]}], deadline_s=10)
        if server.wait(time.monotonic() + KILL_AFTER_S):
            return


def _collected(session: sshdirect.Session, servers: Sequence[Server], wait_s: float) -> list[dict[str, Any]]:
    """Wait for each server to end (``wait_s`` in all), stop the rest; each as a fabric_run run."""
    end = time.monotonic() + wait_s
    found = []
    for server in servers:
        by_itself = server.wait(end)
        if not by_itself:
            _stop(session, server)
        ended = server.ended
        found.append({"id": str(server.command["id"]),
                      "rc": server.chan.recv_exit_status() if ended else sshdirect.GIVEN_UP_RC,
                      "stdout": bytes(server.out).decode(errors="replace"),
                      "stderr": bytes(server.err).decode(errors="replace"), "timed_out": not by_itself})
        server.chan.close()
    return found


@dataclass
class Round:
    """One round's work over the channel: its commands per host and what each host has started."""

    channel: sshdirect.Channel
    sessions: Mapping[str, sshdirect.Session]
    runs: Sequence[Mapping[str, Any]]
    reads: Mapping[str, Sequence[Mapping[str, Any]]]
    deadline_s: int
    started: dict[str, list[Server]] = field(default_factory=dict)

    def env(self, host: str) -> list[str]:
        return ["env", f"PATH={self.channel.path(host)}"]

    def timeout(self, seconds: int) -> list[str]:
        return ["timeout", KILL_AFTER, f"{seconds}s"]

    def servers_of(self, host: str) -> list[Mapping[str, Any]]:
        return [r["server_command"] for r in self.runs if r["server"] == host]

    def clients_of(self, host: str) -> list[Mapping[str, Any]]:
        return [r["client_command"] for r in self.runs if r["client"] == host]

    def before(self, host: str) -> ansible.TaskResult:
        """Step 1 on ``host``: its counter reads, then its servers started and listening."""
        session = self.sessions[host]
        try:
            reads = self._read(host)
            mine = self.started.setdefault(host, [])
            try:
                for command in self.servers_of(host):
                    mine.append(_start(session, command, self.env(host), self.timeout(self.deadline_s)))
            except OSError as exc:
                return _task(host, BEFORE_TASK, {"runs": reads}, f"start: {command['id']}: {exc}")
            problem = _wait_listening(session, mine, self.env(host))
        except (sshdirect.Lost, paramiko.SSHException, OSError, EOFError) as exc:
            return _task(host, BEFORE_TASK, {}, f"{host}: {exc}", unreachable=True)
        started = [{"id": str(s.command["id"]), "pid": s.pid} for s in mine]
        if problem is not None:
            return _task(host, BEFORE_TASK, {"runs": reads}, problem)
        return _task(host, BEFORE_TASK, {"runs": reads, "started": started})

    def clients(self, host: str) -> ansible.TaskResult:
        """Step 2 on ``host``: its clients together, each under its deadline."""
        try:
            runs = self.sessions[host].run(
                self.clients_of(host), deadline_s=self.deadline_s + CLIENT_GRACE_S,
                prefix=self.env(host) + self.timeout(self.deadline_s))
        except sshdirect.Lost as lost:
            return _task(host, CLIENTS_TASK, {"runs": list(lost.runs)}, lost.why, unreachable=True)
        return _task(host, CLIENTS_TASK, {"runs": runs})

    def after(self, host: str) -> ansible.TaskResult:
        """Step 3 on ``host``: its servers waited for and stopped, then its counter reads."""
        try:
            collected = _collected(self.sessions[host], self.started.pop(host, []), COLLECT_S)
            return _task(host, AFTER_TASK, {"runs": self._read(host), "collected": collected})
        except (sshdirect.Lost, paramiko.SSHException, OSError, EOFError) as exc:
            return _task(host, AFTER_TASK, {}, f"{host}: {exc}", unreachable=True)

    def stop_all(self, host: str) -> None:
        """Stop whatever ``host`` still runs of the round (the playbook's ``always`` task)."""
        session = self.sessions.get(host)
        servers = self.started.pop(host, [])
        if session is not None and servers and not session.lost:
            # should this fail too, each server's own timeout ends it at the round's deadline
            with contextlib.suppress(sshdirect.Lost, paramiko.SSHException, OSError, EOFError):
                _collected(session, servers, 0)

    def _read(self, host: str) -> list[dict[str, Any]]:
        reads = self.reads.get(host) or []
        if not reads:
            return []
        return self.sessions[host].run(
            reads, deadline_s=READ_DEADLINE_S + CLIENT_GRACE_S,
            prefix=self.env(host) + self.timeout(READ_DEADLINE_S))


def run_round(channel: sshdirect.Channel, runs: Sequence[Mapping[str, Any]],
              reads: Mapping[str, Sequence[Mapping[str, Any]]], deadline_s: int) -> ansible.RunOutcome:
    """bench_ib_write_bw.yml's round over ``channel`` (``runs``: the playbook's ``fabtune_bench_runs``,
    ``reads``: its ``fabtune_counter_reads``), recorded as that playbook's run.

    Raises:
        HostKeyRejected: a host's key is unknown or changed.
    """
    servers = {str(r["server"]) for r in runs}
    hosts = sorted({h for h, cmds in reads.items() if cmds} | servers)
    clients = sorted({str(r["client"]) for r in runs})
    every = sorted(set(hosts) | set(clients))
    sessions, errors = sshdirect.connect(channel.targets, every, forks=channel.forks)
    work = Round(channel, sessions, runs, reads, deadline_s)
    try:
        if errors:
            lost = [_task(h, BEFORE_TASK, {}, why, unreachable=True) for h, why in sorted(errors.items())]
            return ansible.recorded("bench_ib_write_bw", lost)
        tasks = _parallel(hosts, channel.forks, work.before)
        if not any(t.failed for t in tasks):
            tasks += _parallel(clients, channel.forks, work.clients)
            tasks += _parallel(hosts, channel.forks, work.after)
        return ansible.recorded("bench_ib_write_bw", tasks)
    finally:
        _parallel(sorted(work.started), channel.forks, work.stop_all)
        for session in sessions.values():
            session.close()
