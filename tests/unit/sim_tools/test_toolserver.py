"""The emulated hosts' tool server (fabtune.sim.toolserver) against the tool run by its launcher.

A call through the server must be what the caller sees when the launcher runs the tool itself:
the same standard output and error on the caller's own streams, the same exit status, the caller's
argv, environment, working directory and umask. Here the server runs on the controller, on a
socket of the test's own; the tools chosen need no host (usage, version, a traceback where the
host's state is missing).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fabtune.sim import toolclient, toolserver
from fabtune.testbed import files

CALLS = [
    ["mlnx_qos", "--help"],  # usage on stdout, status 0
    ["ethtool"],  # a usage error on stderr, status 1
    ["rdma", "-V"],
    ["dcb", "help"],  # no host state here: the emulator's traceback, status 1
    ["ib_write_bw", "-h"],  # the benchmarks: perftest's usage, status 1
    ["all_reduce_perf", "-h"],  # nccl-tests' usage, status 0
]


@contextlib.contextmanager
def _serving(argv: list[str], path: Path, log: Path) -> Iterator[Path]:
    """A tool server started with ``argv``, once it listens on ``path``; killed after."""
    with log.open("w") as out:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 30
            while not path.exists():
                assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
                time.sleep(0.05)
            yield path
        finally:
            proc.kill()
            proc.wait(timeout=30)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "tools.sock"
    with _serving([sys.executable, "-m", "fabtune.sim.toolserver", str(path)], path,
                  tmp_path / "toolserver.log") as serving:
        yield serving


def _launcher(tmp_path: Path, name: str, socket_path: Path | None) -> Path:
    """The testbed's launcher of ``name``, its socket moved to the test's own (None: the tool
    runs in the launcher)."""
    text = files.tool_launcher(name)
    assert text.startswith(f"#!{sys.executable} -S\n")
    target = repr(str(socket_path)) if socket_path else repr(str(tmp_path / "absent.sock"))
    text = text.replace("from fabtune.sim.toolclient import run\n",
                        f"from fabtune.sim import toolclient\ntoolclient.SOCKET = {target}\n"
                        "from fabtune.sim.toolclient import run\n")
    path = tmp_path / "bin" / name
    path.parent.mkdir(exist_ok=True)
    path.write_text(text)
    path.chmod(0o755)
    return path


def _call(launcher: Path, args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(launcher), *args], capture_output=True, text=True, timeout=60, cwd=cwd,
                          check=False, env={**os.environ, "FABTUNE_TEST_MARK": "x"})


@pytest.mark.parametrize("argv", CALLS, ids=[" ".join(c) for c in CALLS])
def test_a_served_call_is_what_the_launcher_alone_gives(
    server: Path, tmp_path: Path, argv: list[str]
) -> None:
    name, *args = argv
    alone = _call(_launcher(tmp_path, name, None), args, tmp_path)
    through = _call(_launcher(tmp_path, name, server), args, tmp_path)
    assert (through.returncode, through.stdout) == (alone.returncode, alone.stdout)
    if "Traceback" in alone.stderr:
        assert through.stderr.splitlines()[-1] == alone.stderr.splitlines()[-1]
    else:
        assert through.stderr == alone.stderr
    assert alone.stdout or alone.stderr
    log = (tmp_path / "toolserver.log").read_text()
    assert f"{name} uid={os.getuid()} pid=" in log  # the server ran it, not the launcher


@contextlib.contextmanager
def _probe_server(tmp_path: Path, body: str) -> Iterator[Path]:
    """A server whose ``ethtool`` is a tool of the test's own: ``main(argv)`` with ``body``."""
    probe = tmp_path / "probe.py"
    probe.write_text("import os, sys, time\ndef main(argv):\n" + body)
    code = (f"import sys; sys.path.insert(0, {str(tmp_path)!r})\n"
            "from fabtune.sim import toolserver, tools\n"
            "tools.ENTRIES['ethtool'] = ('probe', 'main')\n"
            "import probe, sys as s; s.modules['fabtune.sim.tools.probe'] = probe\n"
            f"toolserver.serve(__import__('pathlib').Path({str(tmp_path / 'probe.sock')!r}))\n")
    with _serving([sys.executable, "-c", code], tmp_path / "probe.sock", tmp_path / "probe.log") as path:
        yield path


def test_the_server_takes_the_callers_argv_environment_cwd_umask_stdin_and_limits(tmp_path: Path) -> None:
    """The call as the child sees it, read back with a tool of the test's own in the served set."""
    body = ("    import resource\n"
            "    mask = os.umask(0)\n"
            "    print(repr((sys.argv, os.environ.get('FABTUNE_TEST_MARK'), os.getcwd(), oct(mask),\n"
            "                sys.stdin.read(), open('/proc/self/comm').read().strip(),\n"
            "                resource.getrlimit(resource.RLIMIT_NOFILE))))\n"
            "    print('to stderr', file=sys.stderr)\n"
            "    return 3\n")
    with _probe_server(tmp_path, body) as sock:
        launcher = _launcher(tmp_path, "ethtool", sock)
        work = tmp_path / "work"
        work.mkdir()
        done = subprocess.run(["sh", "-c", 'umask 027; ulimit -n 200; exec "$0" -x "a b"', str(launcher)],
                              input="fed\n",
                              capture_output=True, text=True, timeout=60, cwd=work, check=False,
                              env={**os.environ, "FABTUNE_TEST_MARK": "marked"})
    assert done.returncode == 3 and done.stderr == "to stderr\n"
    assert done.stdout == repr(([str(launcher), "-x", "a b"], "marked", str(work), "0o27", "fed\n",
                                "ethtool", (200, 200))) + "\n"


def test_without_a_server_the_launcher_runs_the_tool_itself(tmp_path: Path) -> None:
    done = _call(_launcher(tmp_path, "mlnx_qos", None), ["--help"], tmp_path)
    assert done.returncode == 0 and done.stdout.startswith("Usage: mlnx_qos -i <interface>")


def test_a_call_cut_off_is_refused_and_the_server_serves_on(server: Path, tmp_path: Path) -> None:
    import socket

    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.connect(str(server))
        sock.sendall((100).to_bytes(8, "little") + b"('eth")
        sock.shutdown(socket.SHUT_WR)
        assert sock.recv(4) == b""  # no status: nothing ran
    done = _call(_launcher(tmp_path, "mlnx_qos", server), ["--help"], tmp_path)
    assert done.returncode == 0 and done.stdout.startswith("Usage: mlnx_qos")
    assert "call refused: RequestError('call cut short')" in (tmp_path / "toolserver.log").read_text()


@pytest.mark.parametrize("kill", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_a_served_tool_ends_when_its_caller_is_killed(tmp_path: Path, kill: signal.Signals) -> None:
    """mpirun and fabric_run end a benchmark by signalling the process they started (the launcher):
    the child running the tool goes with it, as the tool in the launcher's own process would."""
    pids = tmp_path / "pid"
    body = (f"    open({str(pids)!r}, 'w').write(str(os.getpid()))\n"
            "    time.sleep(120)\n"
            "    return 0\n")
    with _probe_server(tmp_path, body) as sock:
        caller = subprocess.Popen([str(_launcher(tmp_path, "ethtool", sock))], stdin=subprocess.DEVNULL,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while not pids.exists() or not pids.read_text():
            assert caller.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        child = int(pids.read_text())
        # every thread of the child is named as the tool (its watch on the caller included)
        threads = [t.read_text().strip() for t in Path(f"/proc/{child}/task").glob("*/comm")]
        assert len(threads) == 2 and set(threads) == {"ethtool"}, threads
        caller.send_signal(kill)
        assert caller.wait(timeout=30) == -kill
        while Path(f"/proc/{child}").exists():  # the server reaps it (SIGCHLD ignored)
            assert time.monotonic() < deadline + 30, f"child {child} outlived its caller"
            time.sleep(0.05)


def test_the_served_tools_are_the_tools_and_benchmarks_and_not_systemd_or_lldp() -> None:
    from fabtune.sim.tools import ENTRIES

    assert set(ENTRIES) >= toolserver.SERVED
    assert {"ib_write_bw", "all_reduce_perf", "alltoall_perf", "ethtool"} <= toolserver.SERVED
    assert not toolserver.SERVED & {"systemctl", "systemd-run", "lldpad", "lldptool"}
    assert str(toolserver.SOCKET) == toolclient.SOCKET
    assert "toolclient" in files.tool_launcher("ib_write_bw")
    assert "toolclient" not in files.tool_launcher("systemctl")
