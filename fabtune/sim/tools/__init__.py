"""The emulated node tools, by installed command name.

Each tool is ``main(argv, state=None) -> int``: ``argv`` without the program name, output on
``sys.stdout``/``sys.stderr`` exactly as the real tool, the real exit status. Without ``state`` a
tool acts on the host it runs in (``NodeState.inside_host()``); tests pass a ``NodeState``.

Launcher contract: the testbed installs ``/usr/.../<name>`` files containing::

    #!<venv python>
    import time
    LAUNCHED = time.time()
    from fabtune.sim.tools import run
    run("<name>", LAUNCHED)

``LAUNCHED`` is when the tool's Python code began, before its imports: ``launched_at``. A tool the
host's tool server runs for its launcher (fabtune.sim.toolserver) also knows the launcher's pid:
``launcher_pid``.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable, Iterator, Mapping
from typing import NoReturn

# name -> (module under fabtune.sim.tools, function): imported on first use, so each tool
# invocation loads only its own module (the fabric model with numpy/scipy only for benchmarks).
ENTRIES: dict[str, tuple[str, str]] = {
    "mlnx_qos": ("mlnx_qos", "main"),
    "dcb": ("dcb", "main"),
    "ibdev2netdev": ("ibdev2netdev", "main"),
    "show_gids": ("show_gids", "main"),
    "ibstat": ("ibstat", "main"),
    "ibstatus": ("ibstat", "ibstatus_main"),
    "ibv_devinfo": ("ibv_devinfo", "main"),
    "nvidia-smi": ("nvidia_smi", "main"),
    "ethtool": ("ethtool", "main"),
    "cma_roce_tos": ("cma_roce", "tos_main"),
    "cma_roce_mode": ("cma_roce", "mode_main"),
    "sminfo": ("sminfo", "main"),
    "ib_write_bw": ("perftest", "write_main"),
    "ib_read_bw": ("perftest", "read_main"),
    "ib_send_bw": ("perftest", "send_main"),
    "rdma": ("rdma", "main"),
    "all_reduce_perf": ("nccl_tests", "all_reduce_main"),
    "all_gather_perf": ("nccl_tests", "all_gather_main"),
    "reduce_scatter_perf": ("nccl_tests", "reduce_scatter_main"),
    "alltoall_perf": ("nccl_tests", "alltoall_main"),
    "systemd-run": ("systemd", "run_main"),
    "systemctl": ("systemd", "systemctl_main"),
    "lldptool": ("lldptool", "main"),
    "lldpad": ("lldptool", "lldpad_main"),
}


class _Tools(Mapping[str, Callable[[list[str]], int]]):
    """The tools by command name, each imported when first looked up."""

    def __getitem__(self, name: str) -> Callable[[list[str]], int]:
        module, function = ENTRIES[name]
        main: Callable[[list[str]], int] = getattr(importlib.import_module(f"{__name__}.{module}"), function)
        return main

    def __iter__(self) -> Iterator[str]:
        return iter(ENTRIES)

    def __len__(self) -> int:
        return len(ENTRIES)


TOOLS: Mapping[str, Callable[[list[str]], int]] = _Tools()

_LAUNCHED: dict[str, float] = {}
_LAUNCHER: dict[str, int] = {}


def launched_at() -> float | None:
    """When the launcher began this tool (wall clock), before the tool's imports; None when the
    tool was called from Python, not through a launcher."""
    return _LAUNCHED.get("at")


def launcher_pid() -> int | None:
    """The pid of the launcher this tool runs for, where that is another process (the tool
    server's child runs it); None where the tool runs in its launcher's own process."""
    return _LAUNCHER.get("pid")


def process_pid() -> int:
    """The pid of the process the caller started for this tool, as the tool prints and records it
    (``ibstat``'s ``[PID]``, an rdma_cm listener in ``rdma resource show``): the launcher's where the
    tool server runs the tool, else this process's."""
    return launcher_pid() or os.getpid()


def run(name: str, launched: float | None = None, launcher: int | None = None) -> NoReturn:
    """Run tool ``name`` on ``sys.argv[1:]`` against this host's state and exit with its status.

    Args:
        name: An installed command name (a key of ``TOOLS``).
        launched: When the launcher began (``time.time()`` before any import): ``launched_at``.
        launcher: The launcher's pid, where another process runs the tool for it: ``launcher_pid``.
    """
    if launched is not None:
        _LAUNCHED["at"] = launched
    if launcher is not None:
        _LAUNCHER["pid"] = launcher
    try:
        code = TOOLS[name](sys.argv[1:])
        sys.stdout.flush()
    except BrokenPipeError:
        code = 141
    sys.exit(code)
