"""The emulated node tools, by installed command name.

Each tool is ``main(argv, state=None) -> int``: ``argv`` without the program name, output on
``sys.stdout``/``sys.stderr`` exactly as the real tool, the real exit status. Without ``state`` a
tool acts on the host it runs in (``NodeState.inside_host()``); tests pass a ``NodeState``.

Launcher contract: the testbed installs ``/usr/.../<name>`` files containing::

    #!<venv python>
    from fabtune.sim.tools import run
    run("<name>")
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import NoReturn

from fabtune.sim.tools import (
    cma_roce,
    dcb,
    ethtool,
    ibdev2netdev,
    ibstat,
    ibv_devinfo,
    mlnx_qos,
    nccl_tests,
    nvidia_smi,
    perftest,
    show_gids,
    sminfo,
)

TOOLS: dict[str, Callable[[list[str]], int]] = {
    "mlnx_qos": mlnx_qos.main,
    "dcb": dcb.main,
    "ibdev2netdev": ibdev2netdev.main,
    "show_gids": show_gids.main,
    "ibstat": ibstat.main,
    "ibstatus": ibstat.ibstatus_main,
    "ibv_devinfo": ibv_devinfo.main,
    "nvidia-smi": nvidia_smi.main,
    "ethtool": ethtool.main,
    "cma_roce_tos": cma_roce.tos_main,
    "cma_roce_mode": cma_roce.mode_main,
    "sminfo": sminfo.main,
    "ib_write_bw": perftest.write_main,
    "ib_read_bw": perftest.read_main,
    "ib_send_bw": perftest.send_main,
    "all_reduce_perf": nccl_tests.all_reduce_main,
    "all_gather_perf": nccl_tests.all_gather_main,
    "reduce_scatter_perf": nccl_tests.reduce_scatter_main,
    "alltoall_perf": nccl_tests.alltoall_main,
}


def run(name: str) -> NoReturn:
    """Run tool ``name`` on ``sys.argv[1:]`` against this host's state and exit with its status.

    Args:
        name: An installed command name (a key of ``TOOLS``).
    """
    try:
        code = TOOLS[name](sys.argv[1:])
        sys.stdout.flush()
    except BrokenPipeError:
        code = 141
    sys.exit(code)
