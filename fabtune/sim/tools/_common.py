"""Helpers shared by the emulated tools: output streams and the node state to act on."""

from __future__ import annotations

import errno
import os
import sys
from pathlib import Path
from typing import Any, NoReturn

from fabtune.sim.node import NodeState

CAP_NET_ADMIN = 12
NETLINK_WRITES = ("set_", "add_", "del_", "flush_", "reset_")


def out(text: str = "") -> None:
    """Print one line to stdout (the current ``sys.stdout``, so test capture works)."""
    sys.stdout.write(text + "\n")


def err(text: str) -> None:
    """Print one line to stderr."""
    sys.stderr.write(text + "\n")


def state_or_host(state: NodeState | None) -> NodeState:
    """The injected state, or the state of the host the tool runs in."""
    return state if state is not None else NodeState.inside_host()


def net_admin(status: Path = Path("/proc/self/status")) -> bool:
    """Whether this process holds CAP_NET_ADMIN (``CapEff`` of ``/proc/self/status``).

    rtnetlink refuses every change request (RTM_SETDCB, RTM_NEWLINK, ...) of a process without
    it with EPERM (net/core/rtnetlink.c ``rtnetlink_rcv_msg``; net/dcb/dcbnl.c ``dcb_doit``);
    reads (RTM_GET*) need no capability.
    """
    for line in status.read_text().splitlines():
        if line.startswith("CapEff:"):
            return bool(int(line.split()[1], 16) >> CAP_NET_ADMIN & 1)
    return os.geteuid() == 0


def refuse_netlink(*_args: object, **_kwargs: object) -> NoReturn:
    """What the kernel answers a netlink change request without CAP_NET_ADMIN."""
    raise PermissionError(errno.EPERM, os.strerror(errno.EPERM))


class NetlinkClient:
    """A node's state as a netlink client changes it: each change needs CAP_NET_ADMIN.

    Wraps a ``NodeState`` for tools whose every write goes through rtnetlink (iproute2 ``dcb``);
    a change method called without the capability raises ``PermissionError(EPERM)``.
    """

    def __init__(self, state: NodeState) -> None:
        self._state = state

    def __getattr__(self, name: str) -> Any:
        if name.startswith(NETLINK_WRITES) and not net_admin():
            return refuse_netlink
        return getattr(self._state, name)
